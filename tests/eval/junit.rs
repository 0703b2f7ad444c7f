//! JUnit XML checks: validation against the common schema
//! (tests/fixtures/junit.xsd, the Jenkins junit-10 shape CI systems read) by
//! a real XSD validator (Python's `xmlschema`, which `.ci/run` installs), then
//! a structural pass with quick-xml that the counts match the test cases.

use std::collections::HashMap;

use quick_xml::Reader;
use quick_xml::events::Event;

#[derive(Debug, Default)]
struct Node {
    name: String,
    attrs: HashMap<String, String>,
    children: Vec<Node>,
}

fn parse(xml: &str) -> Node {
    let mut reader = Reader::from_str(xml);
    let mut stack: Vec<Node> = vec![Node::default()];
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Start(e) => stack.push(node(&e)),
            Event::Empty(e) => {
                let n = node(&e);
                stack.last_mut().expect("parent").children.push(n);
            }
            Event::End(_) => {
                let n = stack.pop().expect("open element");
                stack.last_mut().expect("parent").children.push(n);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(stack.len(), 1, "unclosed elements");
    let mut doc = stack.pop().expect("document");
    assert_eq!(doc.children.len(), 1, "one root element");
    doc.children.remove(0)
}

fn node(e: &quick_xml::events::BytesStart<'_>) -> Node {
    Node {
        name: String::from_utf8_lossy(e.name().as_ref()).into_owned(),
        attrs: e
            .attributes()
            .map(|a| {
                let a = a.expect("valid attribute");
                (
                    String::from_utf8_lossy(a.key.as_ref()).into_owned(),
                    a.normalized_value(quick_xml::XmlVersion::default())
                        .expect("attribute value")
                        .into_owned(),
                )
            })
            .collect(),
        children: Vec::new(),
    }
}

fn check_attrs(n: &Node, allowed: &[&str], required: &[&str]) {
    for k in n.attrs.keys() {
        assert!(
            allowed.contains(&k.as_str()),
            "<{}> has attribute {k} not in the schema",
            n.name
        );
    }
    for r in required {
        assert!(
            n.attrs.contains_key(*r),
            "<{}> lacks required attribute {r}",
            n.name
        );
    }
    for k in ["tests", "failures", "errors", "skipped", "disabled"] {
        if let Some(v) = n.attrs.get(k) {
            v.parse::<u64>()
                .unwrap_or_else(|_| panic!("<{}> {k}={v} is not a count", n.name));
        }
    }
    if let Some(t) = n.attrs.get("time") {
        t.parse::<f64>()
            .unwrap_or_else(|_| panic!("<{}> time={t} is not a decimal", n.name));
    }
}

fn count(n: &Node, attr: &str) -> u64 {
    n.attrs.get(attr).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Validates `xml` against tests/fixtures/junit.xsd with an XSD validator.
fn validate_xsd(xml: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("junit.xml");
    std::fs::write(&file, xml).expect("write junit");
    let xsd = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/junit.xsd");
    let script = "import sys\n\
try:\n    import xmlschema\n\
except ImportError:\n    sys.exit('xmlschema is missing: pip install xmlschema (.ci/run does)')\n\
xmlschema.XMLSchema(sys.argv[1]).validate(sys.argv[2])\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script, xsd])
        .arg(&file)
        .output()
        .expect("run python3 (the XSD validator)");
    assert!(
        out.status.success(),
        "the JUnit report does not validate against {xsd}:\n{}\n{xml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Validates `xml`; returns (testcases, failures, errors, skipped).
pub fn validate(xml: &str) -> (u64, u64, u64, u64) {
    validate_xsd(xml);
    let root = parse(xml);
    assert_eq!(root.name, "testsuites", "root element");
    check_attrs(
        &root,
        &[
            "name",
            "tests",
            "failures",
            "errors",
            "skipped",
            "disabled",
            "time",
            "timestamp",
            "uuid",
        ],
        &["tests"],
    );
    let mut totals = (0, 0, 0, 0);
    for suite in &root.children {
        assert_eq!(suite.name, "testsuite", "child of <testsuites>");
        check_attrs(
            suite,
            &[
                "name",
                "tests",
                "failures",
                "errors",
                "skipped",
                "disabled",
                "time",
                "timestamp",
                "hostname",
                "id",
                "package",
                "file",
            ],
            &["name", "tests"],
        );
        let mut s = (0, 0, 0, 0);
        for case in &suite.children {
            match case.name.as_str() {
                "properties" | "system-out" | "system-err" => continue,
                "testcase" => {}
                other => panic!("<{other}> is not allowed in <testsuite>"),
            }
            check_attrs(
                case,
                &[
                    "name",
                    "classname",
                    "time",
                    "assertions",
                    "status",
                    "file",
                    "line",
                    "timestamp",
                ],
                &["name"],
            );
            s.0 += 1;
            let mut outcomes = 0;
            for c in &case.children {
                match c.name.as_str() {
                    "failure" | "error" => {
                        check_attrs(c, &["message", "type"], &[]);
                        outcomes += 1;
                        if c.name == "failure" {
                            s.1 += 1
                        } else {
                            s.2 += 1
                        }
                    }
                    "skipped" => {
                        check_attrs(c, &["message"], &[]);
                        outcomes += 1;
                        s.3 += 1;
                    }
                    "system-out" | "system-err" => {}
                    other => panic!("<{other}> is not allowed in <testcase>"),
                }
            }
            assert!(
                outcomes <= 1,
                "a testcase has at most one failure/error/skipped"
            );
        }
        assert_eq!(count(suite, "tests"), s.0, "testsuite tests count");
        assert_eq!(count(suite, "failures"), s.1, "testsuite failures count");
        assert_eq!(count(suite, "errors"), s.2, "testsuite errors count");
        assert_eq!(count(suite, "skipped"), s.3, "testsuite skipped count");
        totals = (
            totals.0 + s.0,
            totals.1 + s.1,
            totals.2 + s.2,
            totals.3 + s.3,
        );
    }
    assert_eq!(count(&root, "tests"), totals.0, "testsuites tests count");
    assert_eq!(
        count(&root, "failures"),
        totals.1,
        "testsuites failures count"
    );
    assert_eq!(count(&root, "errors"), totals.2, "testsuites errors count");
    totals
}

//! The page around the content: the Content-Security-Policy, the inline
//! stylesheet and script, and the JSON data block the script reads.

use sha2::{Digest, Sha256};

use super::html::{Html, esc, script_json};

/// The page's stylesheet, inlined.
const CSS: &str = include_str!("page.css");
/// The page's script, inlined and allowed by its hash alone.
const JS: &str = include_str!("page.js");

/// Where the script block's bytes are hashed from: the CSP names this
/// exact text, so no other script (an injected one included) may run.
fn script_hash() -> String {
    let digest = Sha256::digest(JS.as_bytes());
    format!("'sha256-{}'", base64(&digest))
}

/// Standard base64 with padding (the CSP hash's encoding).
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The policy: nothing may be loaded from anywhere (no network, no other
/// file), styles only inline, and only this page's own script runs.
pub fn csp() -> String {
    format!(
        "default-src 'none'; style-src 'unsafe-inline'; script-src {}; img-src 'none'; base-uri 'none'; form-action 'none'",
        script_hash()
    )
}

/// A whole page: `title`, the header's `subtitle`, the body `content`
/// (already built from escaped text) and `data` for the script.
pub fn page(title: &str, subtitle: &str, content: Html, data: &serde_json::Value) -> String {
    let mut h = Html::new();
    h.raw("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    h.raw("<meta http-equiv=\"Content-Security-Policy\" content=\"")
        .raw(&esc(&csp()))
        .raw("\">\n");
    h.raw("<meta name=\"referrer\" content=\"no-referrer\">\n");
    h.raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    h.raw("<title>").text(title).raw("</title>\n");
    h.raw("<style>").raw(CSS).raw("</style>\n</head>\n<body>\n");
    h.raw("<header><h1>")
        .text(title)
        .raw("</h1><div class=\"sub\">");
    h.text(subtitle).raw("</div></header>\n<main>\n");
    h.raw(&content.finish());
    h.raw("\n</main>\n<script type=\"application/json\" id=\"runner-data\">");
    h.raw(&script_json(data));
    h.raw("</script>\n<script>")
        .raw(JS)
        .raw("</script>\n</body></html>\n");
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_known_values() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn the_assets_name_no_url_and_cannot_end_their_blocks() {
        for asset in [CSS, JS] {
            for bad in ["http:", "https:", "//", "url(", "@import", "</"] {
                // `//` starts JS comments: only a URL after a quote or paren matters.
                if bad == "//" {
                    assert!(
                        !asset.contains("\"//") && !asset.contains("'//") && !asset.contains("(//")
                    );
                    continue;
                }
                assert!(!asset.contains(bad), "{bad} in an asset");
            }
        }
    }
}

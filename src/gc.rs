//! `runner gc`: removes what runs whose runner is gone (or whose expiry
//! has passed) left behind, on every backend, and gives their work back.

use crate::backend_kind::BackendKind;
use crate::hints::Failure;
use crate::runtime::backend_for;
use crate::terminal::visible;

/// Sweeps every backend and prints what it did; an error is the one line
/// and hint the caller prints.
pub async fn run() -> Result<bool, Failure> {
    let mut clean = true;
    for kind in BackendKind::ALL {
        let cleanup = backend_for(kind)
            .collect_garbage()
            .await
            .map_err(|e| Failure::new(e.to_string(), e.hint()))?;
        for line in &cleanup.done {
            println!("{}", visible(line));
        }
        for e in &cleanup.errors {
            eprintln!("warning: {}", visible(e));
        }
        if let Some(s) = &cleanup.summary {
            eprintln!("gc: {s}");
        }
        clean &= cleanup.errors.is_empty();
    }
    // After the backends: a dead run's disk gives its work back first.
    let swept = crate::exec::temp_dirs::sweep();
    for p in &swept.removed {
        println!("removed {}", visible(&p.display().to_string()));
    }
    for e in &swept.errors {
        eprintln!("warning: {}", visible(e));
    }
    clean &= swept.errors.is_empty();
    Ok(clean)
}

//! A TCP proxy in front of an engine's unix socket whose connections the
//! test cuts: `cut` closes every open connection and stops listening (a
//! new connection is refused) until `restore` listens again on the same
//! port. Stands for a network between runner and a remote engine that
//! drops.

use std::collections::HashMap;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Either end of a proxied connection, to be shut down by a cut.
enum End {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl End {
    fn shutdown(&self) {
        let _ = match self {
            End::Tcp(s) => s.shutdown(Shutdown::Both),
            End::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

#[derive(Default)]
struct State {
    cut: AtomicBool,
    done: AtomicBool,
    /// Open connections by number, both ends each.
    open: Mutex<HashMap<u64, [End; 2]>>,
    next: AtomicU64,
}

pub struct CutProxy {
    port: u16,
    to: PathBuf,
    state: Arc<State>,
}

impl CutProxy {
    /// Listens on a free loopback port and forwards each connection to
    /// the unix socket `to`.
    pub fn start(to: &Path) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let proxy = CutProxy {
            port,
            to: to.to_path_buf(),
            state: Arc::new(State::default()),
        };
        proxy.listen(listener);
        proxy
    }

    /// Accepts on `listener` until a cut or the end.
    fn listen(&self, listener: TcpListener) {
        let st = Arc::clone(&self.state);
        let to = self.to.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.done.load(Ordering::SeqCst) || st.cut.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(conn) = conn {
                    forward(conn, &to, &st);
                }
            }
        });
    }

    /// `DOCKER_HOST` through the proxy.
    pub fn host(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    /// Closes every open connection and stops listening until
    /// [`restore`].
    ///
    /// [`restore`]: CutProxy::restore
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which sees the cut and closes the
        // listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        let open = std::mem::take(&mut *self.state.open.lock().unwrap());
        for end in open.values().flatten() {
            end.shutdown();
        }
    }

    /// Listens again on the same port.
    pub fn restore(&self) {
        let t0 = std::time::Instant::now();
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)) {
                Ok(l) => break l,
                Err(e) => {
                    assert!(
                        t0.elapsed() < std::time::Duration::from_secs(10),
                        "cannot listen on {} again: {e}",
                        self.port
                    );
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            }
        };
        self.state.cut.store(false, Ordering::SeqCst);
        self.listen(listener);
    }
}

/// Copies both ways between `conn` and a new connection to `to`, on two
/// threads; both ends are kept for a cut while the client's side is open.
fn forward(conn: TcpStream, to: &PathBuf, st: &Arc<State>) {
    let Ok(up) = UnixStream::connect(to) else {
        return;
    };
    let clones = (
        conn.try_clone(),
        up.try_clone(),
        conn.try_clone(),
        up.try_clone(),
    );
    let (Ok(conn2), Ok(up2), Ok(c), Ok(u)) = clones else {
        return;
    };
    let id = st.next.fetch_add(1, Ordering::SeqCst);
    st.open
        .lock()
        .unwrap()
        .insert(id, [End::Tcp(c), End::Unix(u)]);
    let st = Arc::clone(st);
    pump(conn, up, move || {
        st.open.lock().unwrap().remove(&id);
    });
    pump(up2, conn2, || {});
}

/// Copies `from` to `to` on a thread of its own; shuts `to`'s writing
/// half when `from` ends, then calls `then`.
fn pump<R, W>(mut from: R, mut to: W, then: impl FnOnce() + Send + 'static)
where
    R: std::io::Read + Send + 'static,
    W: std::io::Write + Send + 'static + HalfClose,
{
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        to.half_close();
        then();
    });
}

trait HalfClose {
    fn half_close(&self);
}

impl HalfClose for TcpStream {
    fn half_close(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl HalfClose for UnixStream {
    fn half_close(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.state.done.store(true, Ordering::SeqCst);
        self.cut();
    }
}

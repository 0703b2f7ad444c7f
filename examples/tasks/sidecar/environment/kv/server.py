"""An in-memory key-value store over HTTP: PUT /KEY stores the body, GET /KEY returns it."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STORE = {}
LOCK = threading.Lock()
MAX_BODY = 64 * 1024


class Handler(BaseHTTPRequestHandler):
    def _reply(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with LOCK:
            value = STORE.get(self.path)
        if value is None:
            self._reply(404, b"not found\n")
        else:
            self._reply(200, value)

    def do_PUT(self):
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            self._reply(400, b"bad Content-Length\n")
            return
        if not 0 <= length <= MAX_BODY:
            self._reply(413, b"too large\n")
            return
        value = self.rfile.read(length)
        with LOCK:
            STORE[self.path] = value
        self._reply(204)


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()

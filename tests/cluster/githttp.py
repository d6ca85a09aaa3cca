#!/usr/bin/env python3
"""A git smart-HTTP server (read and push, no auth) plus static files, for tests, on loopback.

    githttp.py --root DIR [--bind 127.0.0.1] [--port 0] [--port-file FILE]

  /git/<repo>.git/...  -> `git http-backend` (CGI) over the bare repositories in DIR/git/
  /static/<path>       -> files under DIR/static/ (e.g. a Helm repository: index.yaml + .tgz)
  /healthz             -> 200 "ok"

Flux's GitRepository accepts only http(s)/ssh URLs and go-git speaks only smart HTTP, so the dumb
protocol, `git daemon` and file:// are no use there. Pushing is allowed for every repository
(http.receivepack is enabled through REMOTE_USER). Protocol v2 works (Git-Protocol header).
With --port 0 a free port is picked; the port is written to --port-file once listening.
Python 3 standard library only.
"""

import argparse
import http.server
import os
import posixpath
import shutil
import subprocess
import sys
import threading
import urllib.parse


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "osbx-githttp/1"
    root = ""  # set in main

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    # --- dispatch --------------------------------------------------------------------------------
    def do_GET(self):
        self.route()

    def do_HEAD(self):
        self.route()

    def do_POST(self):
        self.route()

    def route(self):
        path, _, query = self.path.partition("?")
        path = urllib.parse.unquote(path)
        if path == "/healthz":
            return self.reply(200, b"ok\n", "text/plain")
        if path.startswith("/git/"):
            return self.git(path[len("/git"):], query)
        if path.startswith("/static/") and self.command in ("GET", "HEAD"):
            return self.static(path[len("/static/"):])
        self.reply(404, b"not found\n", "text/plain")

    def reply(self, code, body, ctype):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def body_length(self):
        n = self.headers.get("Content-Length")
        return int(n) if n is not None else None

    # --- static files ----------------------------------------------------------------------------
    def static(self, rel):
        base = os.path.realpath(os.path.join(self.root, "static"))
        full = os.path.realpath(os.path.join(base, posixpath.normpath("/" + rel).lstrip("/")))
        if not (full == base or full.startswith(base + os.sep)) or not os.path.isfile(full):
            return self.reply(404, b"not found\n", "text/plain")
        ctype = {
            ".yaml": "text/yaml", ".yml": "text/yaml", ".json": "application/json",
            ".tgz": "application/gzip", ".gz": "application/gzip",
        }.get(os.path.splitext(full)[1], "application/octet-stream")
        size = os.path.getsize(full)
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if self.command != "HEAD":
            with open(full, "rb") as f:
                shutil.copyfileobj(f, self.wfile)

    # --- git http-backend (CGI) ------------------------------------------------------------------
    def git(self, path_info, query):
        if ".." in path_info.split("/"):
            return self.reply(404, b"not found\n", "text/plain")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": os.path.join(self.root, "git"),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "SERVER_SOFTWARE": self.server_version,
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path_info,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "REMOTE_ADDR": self.client_address[0],
            "REMOTE_USER": "osbx-test",  # enables receive-pack (push) without repository config
        }
        length = self.body_length()
        if length is not None:
            env["CONTENT_LENGTH"] = str(length)
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        # A gzip-compressed request body (git sends large pushes that way) is handled by
        # http-backend itself through HTTP_CONTENT_ENCODING.
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()

        proc = subprocess.Popen(
            ["git", "http-backend"], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        feeder = threading.Thread(target=self.feed, args=(proc.stdin, length, chunked), daemon=True)
        feeder.start()
        errs = []
        drain = threading.Thread(target=lambda: errs.append(proc.stderr.read()), daemon=True)
        drain.start()

        # CGI response: headers up to a blank line, then the body (streamed, chunked to the client).
        status, headers = 200, []
        while True:
            line = proc.stdout.readline()
            if not line or line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode("latin-1").rstrip("\r\n").partition(":")
            value = value.strip()
            if name.lower() == "status":
                status = int(value.split()[0])
            else:
                headers.append((name, value))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while True:
            chunk = proc.stdout.read1(65536)
            if not chunk:
                break
            if self.command != "HEAD":
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if self.command != "HEAD":
            self.wfile.write(b"0\r\n\r\n")
        proc.wait()
        feeder.join()
        drain.join()
        if proc.returncode != 0 or (errs and errs[0]):
            sys.stderr.write("git http-backend %s %s: rc=%s %s\n" % (
                self.command, path_info, proc.returncode, (errs[0] if errs else b"").decode(errors="replace").strip()))

    def feed(self, out, length, chunked):
        """Copy the request body (Content-Length or chunked) to the CGI's stdin. The body is read
        to its end even if the CGI stops reading, so that the connection stays usable."""
        def write(data):
            nonlocal out
            if out is not None:
                try:
                    out.write(data)
                except (BrokenPipeError, ValueError):
                    out = None
        if chunked:
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                write(self.rfile.read(size))
                self.rfile.readline()  # CRLF after each chunk
        elif length:
            left = length
            while left > 0:
                data = self.rfile.read(min(left, 65536))
                if not data:
                    break
                write(data)
                left -= len(data)
        if out is not None:
            try:
                out.close()
            except BrokenPipeError:
                pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="serves ROOT/git (bare repos) and ROOT/static")
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the port here once listening")
    a = ap.parse_args()
    Handler.root = os.path.realpath(a.root)
    os.makedirs(os.path.join(Handler.root, "git"), exist_ok=True)
    os.makedirs(os.path.join(Handler.root, "static"), exist_ok=True)
    http.server.ThreadingHTTPServer.request_queue_size = 64  # go-git opens several connections
    srv = http.server.ThreadingHTTPServer((a.bind, a.port), Handler)
    port = srv.server_address[1]
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, a.port_file)
    sys.stderr.write("githttp: serving %s on http://%s:%d\n" % (Handler.root, a.bind, port))
    sys.stderr.flush()
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

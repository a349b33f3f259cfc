"""The fleet's transport: an MQTT broker (Mosquitto, started on loopback when asked) and a client
whose messages arrive in a queue.  The client reconnects by itself and subscribes again on every
connection, so a broker restart loses nothing the broker kept (retained messages persist on disk)."""

from __future__ import annotations

import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from zoflash.errors import ZoflashError

DEFAULT_PORT = 1883
CONNECT_TIMEOUT = 10.0


class BrokerError(ZoflashError):
    """No broker to talk to: Mosquitto missing, or nothing listening at the address."""


def parse_url(url: str) -> tuple[str, int]:
    """(host, port) of mqtt://HOST[:PORT] (or HOST[:PORT])."""
    parsed = urlparse(url if "://" in url else f"mqtt://{url}")
    if parsed.scheme not in ("mqtt", "tcp") or not parsed.hostname:
        raise BrokerError(f"--broker {url}: give mqtt://HOST:PORT (or auto: a broker started on loopback)")
    try:
        return parsed.hostname, parsed.port or DEFAULT_PORT
    except ValueError:
        raise BrokerError(f"--broker {url}: the port is not a number in 1..65535") from None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Broker:
    """A Mosquitto broker on loopback, its retained messages persisted in `folder`."""

    port: int
    folder: Path
    proc: subprocess.Popen | None = None
    _own_folder: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> Broker:
        exe = shutil.which("mosquitto") or next(
            (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if Path(p).exists()), None
        )
        if exe is None:
            raise BrokerError(
                "Mosquitto is not installed: `make setup` installs it (Debian: apt install mosquitto), or give "
                "--broker mqtt://HOST:PORT of a running broker"
            )
        conf = self.folder / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
            f"persistence_location {self.folder}/\nautosave_interval 1\nlog_dest file {self.folder}/mosquitto.log\n"
            "max_queued_messages 100000\n"
        )
        self.proc = subprocess.Popen([exe, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        end = time.monotonic() + timeout
        while not _listening("127.0.0.1", self.port):
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise BrokerError(f"Mosquitto exited at start (status {self.proc.returncode}): {err.strip()[-500:]}")
            if time.monotonic() > end:
                self.stop()
                raise BrokerError(f"Mosquitto did not listen on 127.0.0.1:{self.port} within {timeout:g} s")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: Mosquitto saves its retained messages first
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._own_folder is not None:
            self._own_folder.cleanup()


def start_broker(folder: str | Path | None = None) -> Broker:
    """Mosquitto on a free loopback port (its files in `folder`, else a temporary one)."""
    own = None
    if folder is None:
        own = tempfile.TemporaryDirectory(prefix="zoflash-broker-")
        folder = own.name
    broker = Broker(_free_port(), Path(folder), _own_folder=own)
    try:
        return broker.start()
    except BaseException:
        broker.close()
        raise


class Link:
    """An MQTT client: `publish`, and every message of the subscribed topics in `inbox` as
    (topic, payload bytes, retained).  QoS 1 throughout: a message sent while the broker is away
    goes when it is back."""

    def __init__(self, url: str, client_id: str, topics: list[str], will: tuple[str, bytes] | None = None):
        import paho.mqtt.client as mqtt

        self.host, self.port = parse_url(url)
        self.topics = list(topics)
        self.inbox: queue.Queue[tuple[str, bytes, bool]] = queue.Queue()
        self.connected = threading.Event()
        self.connections = 0
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True)
        self.client.max_queued_messages_set(0)  # unlimited: nothing sent while away is dropped
        self.client.reconnect_delay_set(1, 2)
        if will is not None:
            self.client.will_set(will[0], will[1], qos=1)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            return
        self.connections += 1
        for t in self.topics:
            client.subscribe(t, qos=1)
        self.connected.set()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        self.connected.clear()

    def _on_message(self, client, userdata, msg) -> None:
        self.inbox.put((msg.topic, bytes(msg.payload), bool(msg.retain)))

    def start(self, timeout: float = CONNECT_TIMEOUT) -> Link:
        try:
            self.client.connect(self.host, self.port, keepalive=10)
        except OSError as exc:
            raise BrokerError(
                f"no MQTT broker at {self.host}:{self.port} ({exc}): start one (zoflash fleet serve --broker auto "
                "starts Mosquitto) or give its address with --broker"
            ) from None
        self.client.loop_start()
        if not self.connected.wait(timeout):
            self.close()
            raise BrokerError(f"the MQTT broker at {self.host}:{self.port} did not accept the connection")
        return self

    def publish(self, topic: str, payload: bytes | str, retain: bool = False) -> int:
        """Send; returns the payload's bytes."""
        data = payload.encode() if isinstance(payload, str) else bytes(payload)
        self.client.publish(topic, data, qos=1, retain=retain)
        return len(data)

    def get(self, timeout: float) -> tuple[str, bytes, bool] | None:
        try:
            return self.inbox.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()

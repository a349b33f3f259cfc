"""Ports for the monitor: pyserial URLs, finding a board's serial port by USB VID:PID, and a
local program (the host training program) seen as a port.

A port here is an object with `read(size)` (returns the bytes that arrived within its timeout,
possibly none; raises serial.SerialException when the connection is lost), `write(data)` and
`close()`; pyserial's port objects are such objects.

    port = open_port("socket://127.0.0.1:4321")        # or /dev/ttyACM0, COM3, rfc2217://, loop://
    port = open_port(find_port([(0x0483, None)]))        # the one ST-LINK virtual COM port
"""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
from collections.abc import Iterable, Sequence

import serial
from serial.urlhandler import protocol_socket

from zoflash.errors import ZoflashError

DEFAULT_BAUD = 115200
READ_TIMEOUT = 0.05  # seconds a read waits for the first byte
ST_VID = 0x0483
# Without board data: any ST-LINK (ST's vendor id, any product id).
DEFAULT_USB_IDS: tuple[tuple[int, int | None], ...] = ((ST_VID, None),)

UsbId = tuple[int, "int | None"]


class PortError(ZoflashError):
    """No port to open (none matches, several match, or it cannot be opened)."""


# ------------------------------------------------------------------------------ USB ids


def parse_usb_id(value) -> tuple[int, int | None]:
    """(vid, pid or None for any): from "0483:374e", "0x0483:0x374E", "0483" (any product),
    "0483:*", or a (vid, pid) pair of ints (pid may be None)."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(v is None or isinstance(v, int) for v in value):
        vid, pid = value
        if isinstance(vid, int) and 0 <= vid <= 0xFFFF and (pid is None or 0 <= pid <= 0xFFFF):
            return vid, pid
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(?:0x)?([0-9a-fA-F]{1,4})\s*(?::\s*(?:(?:0x)?([0-9a-fA-F]{1,4})|\*)\s*)?", value)
        if m:
            return int(m.group(1), 16), (int(m.group(2), 16) if m.group(2) else None)
    raise PortError(f"USB id {value!r} is not VID:PID in hex (for example 0483:374e, or 0483 for any product)")


def format_usb_id(vid: int | None, pid: int | None) -> str:
    if vid is None:
        return "no USB id"
    return f"{vid:04x}:" + ("*" if pid is None else f"{pid:04x}")


def _describe(p) -> str:
    extra = " ".join(
        x
        for x in (getattr(p, "manufacturer", None), getattr(p, "product", None) or getattr(p, "description", None))
        if x and x != "n/a"
    )
    return f"{p.device} ({format_usb_id(p.vid, p.pid)}{', ' + extra if extra else ''})"


def find_port(usb_ids: Iterable = DEFAULT_USB_IDS, ports: Sequence | None = None) -> str:
    """The device name of the one serial port whose USB VID:PID is in `usb_ids`.  `ports`
    defaults to serial.tools.list_ports.comports().  PortError, listing the ports seen, when
    none or several match."""
    ids = [parse_usb_id(u) for u in usb_ids]
    if ports is None:
        from serial.tools import list_ports

        ports = list(list_ports.comports())
    matches = [
        p
        for p in ports
        if p.vid is not None and any(p.vid == vid and (pid is None or p.pid == pid) for vid, pid in ids)
    ]
    wanted = ", ".join(format_usb_id(*i) for i in ids)
    seen = "; ".join(_describe(p) for p in sorted(ports, key=lambda p: p.device)) or "none"
    if not matches:
        raise PortError(
            f"no serial port with USB id {wanted} (is the board plugged in, and its ST-LINK USB port "
            f"the one connected?). Ports seen: {seen}. Give the port with --port"
        )
    if len(matches) > 1:
        raise PortError(
            f"{len(matches)} serial ports have USB id {wanted}: "
            f"{', '.join(_describe(p) for p in matches)}. Choose one with --port"
        )
    return matches[0].device


# ------------------------------------------------------------------------------ opening


class SocketPort(protocol_socket.Serial):
    """pyserial's socket:// port, except that it never discards received bytes: the stock port
    empties its input right after connecting (losing what a device such as QEMU sends at once,
    its hello), and its read raises when the peer closes in the middle of a read, dropping the
    bytes it had received in that same call.  Here read() returns what has arrived as soon as
    something has (one recv) and raises on a closed connection only when nothing came."""

    returns_early = True  # read(size) does not wait to fill `size`

    def open(self) -> None:
        super().open()
        # a request and its answer are small frames: sent at once, not held back for the
        # peer's acknowledgement of the previous one (Nagle's algorithm)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def reset_input_buffer(self) -> None:
        """Keep the input: a monitor must not lose what the device sent."""

    def read(self, size: int = 1) -> bytes:
        if not self.is_open:
            raise serial.PortNotOpenError()
        try:
            ready, _, _ = select.select([self._socket], [], [], self._timeout)
            if not ready:
                return b""
            data = self._socket.recv(size)
        except OSError as exc:
            raise serial.SerialException(f"read failed: {exc}") from None
        if not data:
            raise serial.SerialException("socket disconnected")
        return data


def is_url(port: str) -> bool:
    return "://" in port


def check_port_name(port: str) -> None:
    """PortError now for a port name that can never open (a socket URL without HOST:PORT, a URL
    scheme pyserial does not know)."""
    if port.startswith("socket://") and not re.fullmatch(r"socket://[^:/?]+:\d{1,5}(/.*)?(\?.*)?", port):
        raise PortError(f"'{port}' is not a socket URL: use socket://HOST:PORT, e.g. socket://127.0.0.1:4321")
    if is_url(port):
        try:
            serial.serial_for_url(port, do_not_open=True)
        except (ValueError, serial.SerialException) as exc:
            raise PortError(
                f"'{port}': {exc} (use a device such as /dev/ttyACM0 or COM3, or a URL: socket://, rfc2217://, loop://)"
            ) from None


def open_port(port: str, baud: int = DEFAULT_BAUD, timeout: float = READ_TIMEOUT):
    """Open a device (/dev/ttyACM0, COM3) or a pyserial URL (socket://, rfc2217://, loop://, ...).
    Devices are opened exclusively (a second monitor on the same port would split its bytes).
    Raises serial.SerialException if it cannot be opened (now)."""
    if port.startswith("socket://"):
        return SocketPort(port, baudrate=baud, timeout=timeout)
    extra = {} if is_url(port) else {"exclusive": True}
    return serial.serial_for_url(port, baudrate=baud, timeout=timeout, **extra)


# ------------------------------------------------------------------------------ a program as a port


class ProgramPort:
    """A local program as the device: its stdout is what the device sends, its stdin takes the
    commands (the host training program reads them from a pipe on stdin).  Its end of output
    (the program exited) reads as a lost connection that cannot come back."""

    returns_early = True

    def __init__(
        self, argv: Sequence[str], timeout: float = READ_TIMEOUT, cwd: str | None = None, preload: bytes = b""
    ):
        """`preload`: bytes already waiting on its input when it starts (commands it finds at its
        first poll); at most a pipe buffer (4 KiB is always safe)."""
        self.argv = [str(a) for a in argv]
        self.timeout = timeout
        r, w = os.pipe()
        try:
            if preload:
                os.write(w, preload)
            self.proc = subprocess.Popen(self.argv, stdin=r, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
        except BaseException:
            os.close(w)
            raise
        finally:
            os.close(r)
        self._stdin = os.fdopen(w, "wb")
        self.is_open = True
        self.stderr = ""  # what the program wrote to stderr, once closed

    def read(self, size: int = 1) -> bytes:
        assert self.proc.stdout is not None  # started with stdout=PIPE
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], self.timeout)
        if not ready:
            return b""
        data = os.read(fd, size)
        if not data:
            raise serial.SerialException(
                f"the program {self.argv[0]} ended its output (exit status {self.proc.wait()})"
            )
        return data

    def write(self, data: bytes) -> int:
        try:
            self._stdin.write(data)
            self._stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise serial.SerialException(f"cannot write to the program {self.argv[0]}: {exc}") from None
        return len(data)

    def close(self, grace: float = 1.0) -> None:
        """Close its input (no more commands), give it `grace` seconds to end (it may be about
        to: its done record was read), then stop it, and reap it."""
        if not self.is_open:
            return
        self.is_open = False
        try:
            self._stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None and self.proc.stderr is not None  # started with both PIPEs
        self.stderr = self.proc.stderr.read().decode(errors="replace")
        self.proc.stdout.close()
        self.proc.stderr.close()

"""The in-process write gate: held for exactly a write transaction, foreground first, never a deadlock."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import Engine, text

from memoryd.store.engine import read_only, write_gate
from memoryd.store.writegate import WriteGate, mark_foreground


class _Conn:
    """Stands in for a driver connection (the gate only keys on identity)."""


def test_gate_is_held_exactly_while_a_write_transaction_is_open(engine: Engine) -> None:
    gate = write_gate(engine)
    assert gate is not None and not gate.held
    with engine.begin() as conn:
        conn.execute(text("SELECT 1"))
        assert gate.held
    assert not gate.held
    with pytest.raises(RuntimeError), engine.begin():
        assert gate.held
        raise RuntimeError("roll back")
    assert not gate.held
    with read_only(engine) as conn:
        conn.execute(text("SELECT 1"))
        assert not gate.held  # a read snapshot never takes the gate


def test_a_second_writer_waits_for_the_first_to_commit(engine: Engine) -> None:
    order: list[str] = []
    first_in = threading.Event()
    let_go = threading.Event()

    def first() -> None:
        with engine.begin() as conn:
            conn.execute(text("SELECT 1"))
            first_in.set()
            let_go.wait(5)
            order.append("first commits")

    def second() -> None:
        first_in.wait(5)
        with engine.begin() as conn:
            order.append("second begins")
            conn.execute(text("SELECT 1"))

    a, b = threading.Thread(target=first), threading.Thread(target=second)
    a.start()
    b.start()
    first_in.wait(5)
    b.join(0.2)
    assert b.is_alive()  # blocked at the gate, not failing
    let_go.set()
    a.join(5)
    b.join(5)
    assert order == ["first commits", "second begins"]
    gate = write_gate(engine)
    assert gate is not None and gate.timeouts == 0


def _waiter(gate: WriteGate, conn: _Conn, got: list[str], name: str,
            foreground: bool) -> Callable[[], None]:
    def run() -> None:
        if foreground:
            mark_foreground()
        assert gate.acquire(conn)
        got.append(name)
        gate.release(conn)
    return run


def test_a_foreground_writer_goes_before_background_ones_already_waiting() -> None:
    gate = WriteGate(timeout_s=5.0)
    holder = _Conn()
    assert gate.acquire(holder)
    got: list[str] = []
    background = threading.Thread(target=_waiter(gate, _Conn(), got, "background", False))
    background.start()
    background.join(0.1)  # waiting at the gate
    foreground = threading.Thread(target=_waiter(gate, _Conn(), got, "foreground", True))
    foreground.start()
    foreground.join(0.1)
    gate.release(holder)
    background.join(5)
    foreground.join(5)
    assert got == ["foreground", "background"]


def test_a_wait_past_the_timeout_goes_ahead_without_the_gate() -> None:
    gate = WriteGate(timeout_s=0.05)
    holder, other = _Conn(), _Conn()
    assert gate.acquire(holder)
    assert gate.acquire(other) is False  # left to SQLite's own busy handling
    assert gate.timeouts == 1
    gate.release(other)  # not the holder: no effect
    assert gate.held
    gate.release(holder)
    assert not gate.held

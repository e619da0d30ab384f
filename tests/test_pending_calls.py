"""A call that arrives while the sidecar's loop is busy waits to be asked for.

gRPC core cancels a call its server has not asked for within
``grpc.server_max_unrequested_time_in_server`` (30 s by default), and grpc.aio
asks for calls from the event loop. Here a real gRPC server with the sidecar's
``SERVER_OPTIONS`` has its loop held for longer than gRPC's default by one
call (a blocking handler, as a loop saturated by reports is): the calls opened
meanwhile must still be served once the loop is free, not end CANCELLED.
"""

from __future__ import annotations

import asyncio
import threading
import time

import grpc

from trainprobe.sidecar.transport.listen.sockets import PENDING_CALL_WAIT_S, SERVER_OPTIONS

#: Longer than gRPC's own default (30 s), which this must outlast.
BLOCK_S = 33.0
METHOD = "/trainprobe.test.Pending/Call"


def _serve(port_box: list[int], started: threading.Event, stop: threading.Event) -> None:
    async def main() -> None:
        async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            if request == b"block":
                time.sleep(BLOCK_S)  # holds the loop: no call is asked for meanwhile
            return request

        handler = grpc.method_handlers_generic_handler(
            "trainprobe.test.Pending",
            {"Call": grpc.unary_unary_rpc_method_handler(call)},
        )
        server = grpc.aio.server(options=SERVER_OPTIONS)
        server.add_generic_rpc_handlers((handler,))
        port_box.append(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        started.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await server.stop(0)

    asyncio.run(main())


def test_calls_opened_while_the_loop_is_held_are_served_after_it() -> None:
    assert PENDING_CALL_WAIT_S > BLOCK_S
    port_box: list[int] = []
    started, stop = threading.Event(), threading.Event()
    server = threading.Thread(target=_serve, args=(port_box, started, stop), daemon=True)
    server.start()
    assert started.wait(10)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port_box[0]}") as ch:
            call = ch.unary_unary(METHOD)
            blocker = call.future(b"block", timeout=120)
            time.sleep(1.0)  # the blocking call is running: the loop is held
            # The first of these may meet a request grpc.aio had already made; the
            # rest wait unrequested for the whole block.
            waiting = [call.future(f"w{i}".encode(), timeout=120) for i in range(4)]
            assert blocker.result() == b"block"
            answers, failures = [], []
            for i, f in enumerate(waiting):
                try:
                    answers.append(f.result())
                except grpc.RpcError as err:
                    failures.append((i, err.code(), err.details()))
            assert not failures, f"calls ended while waiting for a busy loop: {failures}"
            assert answers == [f"w{i}".encode() for i in range(4)]
    finally:
        stop.set()
        server.join(10)

"""The streaming call's end (`rollout._finish`): result, put error, or a cancelled put."""
import asyncio

import pytest

from yatt.exec.rollout import _Call, _finish


def _settle(make_put):
    async def go():
        loop = asyncio.get_running_loop()
        call = _Call(remaining=0, results=[1, 2], future=loop.create_future())
        put = make_put(loop)
        put.add_done_callback(lambda p: _finish(call, p))
        await asyncio.sleep(0)
        return call.future
    return asyncio.run(go())


def test_finished_put_ends_the_call_with_its_results():
    def done(loop):
        f = loop.create_future()
        f.set_result(None)
        return f
    assert _settle(done).result() == [1, 2]


def test_failed_or_cancelled_put_fails_the_call_instead_of_hanging():
    def failed(loop):
        f = loop.create_future()
        f.set_exception(ValueError("queue gone"))
        return f

    def cancelled(loop):
        f = loop.create_future()
        f.cancel()
        return f
    with pytest.raises(ValueError, match="queue gone"):
        _settle(failed).result()
    with pytest.raises(RuntimeError, match="cancelled"):
        _settle(cancelled).result()

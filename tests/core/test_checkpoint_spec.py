"""CheckpointSpec: which writer an asynchronous save gets, and the field as a config sees it."""
import pytest

from yatt.core.errors import InputError
from yatt.core.schema import from_dict
from yatt.core.specs import CheckpointSpec, CkptWriter


def test_writer_choice():
    assert CkptWriter.AUTO.thread(cpu=True) and not CkptWriter.AUTO.thread(cpu=False)
    assert CkptWriter.THREAD.thread(cpu=False) and not CkptWriter.PROCESS.thread(cpu=True)


def test_writer_from_a_config():
    assert from_dict(CheckpointSpec, {"writer": "process"}).writer is CkptWriter.PROCESS
    assert CheckpointSpec().writer is CkptWriter.AUTO
    with pytest.raises(InputError, match="writer"):
        from_dict(CheckpointSpec, {"writer": "fork"})

"""The planner's close-call line: modes nearer than the cost model's a-priori error."""
from types import SimpleNamespace as NS

from yatt.core.roles import Mode
from yatt.planner.explain import CLOSE_CALL, close_call


def _best(mode: Mode, mean: float):
    return NS(plan=NS(mode=mode), mean=mean)


def test_a_margin_inside_the_model_error_is_called_close():
    line = close_call([_best(Mode.COLOCATE, 3.0), _best(Mode.PARTIAL, 3.1), None])
    assert line.startswith("close call: colocate and partial are 3.2% apart")
    assert "--mode partial" in line


def test_a_clear_winner_or_a_single_mode_gets_no_line():
    b = 3.0 / (1 - CLOSE_CALL) * 1.001
    assert close_call([_best(Mode.COLOCATE, 3.0), _best(Mode.PARTIAL, b)]) == ""
    assert close_call([_best(Mode.PARTIAL, 3.0), None, None]) == ""


def test_the_two_fastest_modes_are_compared():
    line = close_call([_best(Mode.ASYNC, 5.0), _best(Mode.PARTIAL, 2.0), _best(Mode.COLOCATE, 2.1)])
    assert "partial and colocate" in line

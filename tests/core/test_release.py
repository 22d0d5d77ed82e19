"""resolve_release: the action of every role under every release policy, on CPU and GPU."""
import pytest

from yatt.core import ReleaseAction, ReleasePolicy, Role, resolve_release

K, O, T = ReleaseAction.KEEP, ReleaseAction.OFFLOAD, ReleaseAction.TEARDOWN
R, G, TR, REF = Role.ROLLOUT, Role.GENRM, Role.TRAINER, Role.REFERENCE

# (policy, cpu) -> action per role
EXPECTED = {
    (ReleasePolicy.RESIDENT, False): {R: K, G: K, TR: K, REF: K},
    (ReleasePolicy.RESIDENT, True): {R: K, G: K, TR: K, REF: K},
    (ReleasePolicy.TEARDOWN, False): {R: T, G: T, TR: K, REF: K},
    (ReleasePolicy.TEARDOWN, True): {R: T, G: T, TR: K, REF: K},
    (ReleasePolicy.OFFLOAD, False): {R: O, G: O, TR: O, REF: O},   # GPU: sleep mode, host copy
    (ReleasePolicy.OFFLOAD, True): {R: T, G: T, TR: K, REF: K},    # vLLM-CPU cannot sleep
}


def test_the_table_covers_every_policy_and_role():
    assert set(EXPECTED) == {(p, cpu) for p in ReleasePolicy for cpu in (False, True)}
    assert all(set(v) == set(Role) for v in EXPECTED.values())


@pytest.mark.parametrize("policy", list(ReleasePolicy))
@pytest.mark.parametrize("cpu", [False, True])
@pytest.mark.parametrize("role", list(Role))
def test_resolve_release(policy, cpu, role):
    assert resolve_release(policy, role, cpu=cpu) is EXPECTED[policy, cpu][role]


def test_trainer_and_reference_are_never_torn_down():
    for p in ReleasePolicy:
        for cpu in (False, True):
            for role in (TR, REF):
                assert resolve_release(p, role, cpu=cpu) is not T

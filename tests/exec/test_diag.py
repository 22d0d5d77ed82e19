"""SIGUSR1 dumps a process's stacks and leaves it running: in the driver (every `yatt`
verb installs it) and in every Ray worker (the job's setup hook)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_sigusr1_dumps_every_thread_and_the_process_goes_on():
    code = ("import os, signal, threading, time\n"
            "from yatt.exec import diag\n"
            "diag.install()\n"
            "def waiting_helper(): time.sleep(30)\n"
            "threading.Thread(target=waiting_helper, daemon=True).start()\n"
            "time.sleep(0.2)\n"
            "os.kill(os.getpid(), signal.SIGUSR1)\n"
            "print('still running')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "still running"
    assert "waiting_helper" in p.stderr and p.stderr.lower().count("thread 0x") >= 2, p.stderr


def test_a_ray_worker_dumps_its_stacks_to_its_log_and_goes_on(ray_cluster):
    import glob
    import time

    import ray

    @ray.remote(num_cpus=0)
    def signal_self() -> int:
        os.kill(os.getpid(), signal.SIGUSR1)   # the default action would end the worker
        time.sleep(0.5)
        return os.getpid()

    pid = ray.get(signal_self.remote(), timeout=120)
    logs = ray._private.worker._global_node.get_logs_dir_path()
    err = glob.glob(os.path.join(logs, f"worker-*-{pid}.err"))
    assert len(err) == 1, (logs, pid)
    text = open(err[0]).read()
    assert "signal_self" in text and "thread 0x" in text.lower(), text[-2000:]


def test_only_processes_with_the_handler_are_signalled():
    from yatt.exec import diag

    wait = "import sys, time\n{}\nprint('ready', flush=True)\ntime.sleep(60)\n"
    with_h = subprocess.Popen([sys.executable, "-c", wait.format(
        "from yatt.exec import diag; diag.install()")], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    without = subprocess.Popen([sys.executable, "-c", wait.format("")], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert with_h.stdout.readline() == without.stdout.readline() == "ready\n"
        assert diag._catches(with_h.pid, signal.SIGUSR1)
        assert not diag._catches(without.pid, signal.SIGUSR1)
        assert with_h.pid in diag.dump([with_h.pid])
        assert with_h.stderr.readline().startswith("Current thread 0x")   # and it goes on
        assert with_h.poll() is None
    finally:
        for p in (with_h, without):
            p.kill()
            p.wait()

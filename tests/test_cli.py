"""The two CLIs as a user meets them: what they print, and what they leave behind.

Real sidecar processes, real hooked workers, real sockets: a port really held
by this test process, a socket path where nothing listens.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support import PYTHON, REPO, child_env, ctl, free_port, short_tmpdir, sidecar, wait_for
from trainprobe.sidecar.cli.ctl import main as ctl_main

WORKER = REPO / "tests" / "workers" / "hang_after.py"
LONG_JOB = "torchelastic-3f2a9c1e-5b7d-4e08-a1c6-9d2e7f4b8a10"


def sidecar_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "trainprobe.sidecar", *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{text}"
    return lines[0]


def test_status_shows_whole_job_ids_and_diagnose_needs_no_job_for_one() -> None:
    with sidecar() as sc:
        worker = subprocess.Popen(
            [PYTHON, str(WORKER), LONG_JOB, "100000"],
            env=child_env(TRAINPROBE_TARGET=sc.target),
            stdout=subprocess.DEVNULL,
        )
        try:
            status = wait_for(
                lambda: (
                    (r := ctl("status", "--target", sc.target)).returncode == 0
                    and LONG_JOB in r.stdout
                    and r
                ),
                30,
                what="the worker in status",
            )
            # The id a user copies from status is the one diagnose knows: whole,
            # on its job's line, and every line fits 100 columns.
            lines = status.stdout.splitlines()
            assert lines[0].split()[:2] == ["job", LONG_JOB]
            assert lines[1].split()[:2] == ["RANK", "PID"]
            assert lines[2].split()[0] == "0"
            assert max(len(line) for line in lines) <= 100, status.stdout
            copied = lines[0].split()[1]
            wide = ctl("status", "--wide", "--target", sc.target)
            (row,) = [line for line in wide.stdout.splitlines() if "JOB" not in line]
            assert row.split()[0] == LONG_JOB
            header = wide.stdout.splitlines()[0]
            assert header.index("RANK") > len(LONG_JOB)  # the columns still line up
            by_id = ctl("diagnose", "--job", copied, "--target", sc.target)
            assert by_id.returncode == 0, by_id.stderr
            alone = ctl("diagnose", "--json", "--target", sc.target)
            assert alone.returncode == 0, alone.stderr
            assert json.loads(alone.stdout)["job_id"] == LONG_JOB
        finally:
            worker.kill()
            worker.wait()


def test_diagnose_without_job_names_the_jobs_when_there_are_several() -> None:
    with sidecar() as sc:
        workers = [
            subprocess.Popen(
                [PYTHON, str(WORKER), job, "100000"],
                env=child_env(TRAINPROBE_TARGET=sc.target, TRAINPROBE_JOB_NAME="twin <run>"),
                stdout=subprocess.DEVNULL,
            )
            for job in ("job-a", "job-b")
        ]
        try:
            wait_for(lambda: ctl("status", "--target", sc.target).stdout.count("job-") == 2, 30)
            r = ctl("diagnose", "--target", sc.target)
            assert r.returncode == 1
            line = one_line(r.stderr)
            assert "serves 2 running jobs (twin <run> (id job-a), twin <run> (id job-b)): " in line
            # A name two jobs share is no job: an error listing their ids, in every command.
            for cmd in ("status", "diagnose", "top"):
                extra = ["--once"] if cmd == "top" else []
                r = ctl(cmd, "--target", sc.target, "--job", "twin <run>", *extra)
                assert r.returncode == 1, (cmd, r.stdout)
                assert "2 jobs are named 'twin <run>': ['job-a', 'job-b']" in one_line(r.stderr)
            assert ctl("status", "--target", sc.target, "--job", "job-a").returncode == 0
            # A finished job is not counted: diagnose serves the one still running.
            workers[1].kill()
            workers[1].wait()
            wait_for(lambda: "job-b" not in ctl("diagnose", "--target", sc.target).stderr, 30)
            r = ctl("diagnose", "--json", "--target", sc.target)
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["job_id"] == "job-a"
        finally:
            for w in workers:
                w.kill()
                w.wait()


def test_no_sidecar_is_one_line_that_says_to_start_one() -> None:
    sock = short_tmpdir() / "none.sock"
    r = ctl("status", "--target", f"unix://{sock}")
    assert r.returncode == 1
    # The command it names listens where the client looked (not the default socket).
    assert one_line(r.stderr) == (
        f"trainprobe: error: no sidecar at unix://{sock}: start one with "
        f"`trainprobe-sidecar --listen unix://{sock}`, or pass --target"
    )
    port = free_port()
    r = ctl("diagnose", "--target", f"tcp://127.0.0.1:{port}")
    assert r.returncode == 1
    # A TCP listener needs a token: the command it names is one the sidecar accepts.
    assert (
        f"start one with `trainprobe-sidecar --listen tcp://127.0.0.1:{port} --token-file FILE`"
        in one_line(r.stderr)
    )


def test_wrong_scheme_is_rejected_with_the_accepted_forms() -> None:
    r = sidecar_cli("--listen", "http://127.0.0.1:7777")
    assert r.returncode == 2
    assert "use tcp://HOST:PORT or unix:///PATH" in one_line(r.stderr)
    r = ctl("status", "--target", "http://127.0.0.1:7777")
    assert r.returncode == 2
    assert "use tcp://HOST:PORT or unix:///PATH" in one_line(r.stderr)


def test_port_in_use_names_the_process_that_holds_it() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        state = short_tmpdir()
        r = sidecar_cli(
            "--listen", f"tcp://127.0.0.1:{port}", "--insecure", "--state-dir", str(state)
        )
    assert r.returncode == 1
    # The start-up INFO log may precede it; no gRPC C-core "Failed to bind" follows.
    line = one_line("\n".join(x for x in r.stderr.splitlines() if " INFO " not in x))
    me = Path("/proc/self/comm").read_text().strip()  # this test's own process name
    assert f"port {port} is in use by pid {os.getpid()} ({me})" in line, line
    assert "stop it or choose another port" in line


def test_stack_files_are_removed_by_the_sidecar_after_a_kill_and_by_the_next_hook() -> None:
    runtime = short_tmpdir()
    # A leftover of a process that no longer exists, and one of a live process.
    dead = subprocess.run([PYTHON, "-c", "import os; print(os.getpid())"], capture_output=True)
    dead_file = runtime / f"stacks-{int(dead.stdout)}.txt"
    live_file = runtime / f"stacks-{os.getpid()}.txt"
    dead_file.write_text("")
    live_file.write_text("")
    with sidecar("--stall-timeout-s", "2", "--hang-patience-s", "0") as sc:
        worker = subprocess.Popen(
            [PYTHON, str(WORKER), "stackfile", "30"],
            env=child_env(TRAINPROBE_TARGET=sc.target, TRAINPROBE_RUNTIME_DIR=str(runtime)),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert worker.stdout.readline().startswith("hang")
            own = runtime / f"stacks-{worker.pid}.txt"
            # The new hook swept the dead process's file and left the live one's.
            assert own.exists() and live_file.exists() and not dead_file.exists()
            wait_for(
                lambda: sc.incidents("action", job="stackfile"),
                30,
                what="the kill",
            )
            assert worker.wait(10) != 0  # SIGTERM: no atexit, the hook could not clean up
            assert not own.exists(), "the sidecar removes a killed worker's stack file"
        finally:
            worker.kill()
            worker.wait()


def test_bind_errors_say_what_to_do() -> None:
    state = str(short_tmpdir())
    # TEST-NET-1 (RFC 5737): never an address of this machine.
    r = sidecar_cli("--listen", "tcp://192.0.2.1:7070", "--insecure", "--state-dir", state)
    assert r.returncode == 1
    line = one_line("\n".join(x for x in r.stderr.splitlines() if " INFO " not in x))
    assert "192.0.2.1 is not an address of this machine; use tcp://0.0.0.0:7070" in line
    # A socket directory that cannot be created (a file is in the way).
    blocker = Path(state) / "file"
    blocker.write_text("")
    r = sidecar_cli("--listen", f"unix://{blocker}/s.sock", "--state-dir", state)
    assert r.returncode == 1
    line = one_line("\n".join(x for x in r.stderr.splitlines() if " INFO " not in x))
    assert f"unix://{blocker}/s.sock: {blocker} is not a directory" in line
    assert "choose another --listen" in line


def test_help_points_to_the_settings_reference_an_installed_package_has() -> None:
    for cli in (sidecar_cli, ctl):
        out = cli("--help")
        assert out.returncode == 0 and "trainprobe-sidecar --list-settings" in out.stdout
    listed = sidecar_cli("--list-settings")
    assert listed.returncode == 0
    assert listed.stdout == (REPO / "docs" / "CONFIG.md").read_text()


def test_a_hook_that_exits_normally_removes_its_stack_file() -> None:
    runtime, work = short_tmpdir(), short_tmpdir()
    with sidecar() as sc:
        proc = subprocess.Popen(
            [PYTHON, str(REPO / "tests" / "workers" / "loop.py"), "60", "0.05", str(work / "p")],
            env=child_env(TRAINPROBE_TARGET=sc.target, TRAINPROBE_RUNTIME_DIR=str(runtime)),
        )
        own = runtime / f"stacks-{proc.pid}.txt"
        wait_for(own.exists, 60, what="the hook's stack file")  # armed
        assert proc.wait(120) == 0
    assert not own.exists(), "the hook removes its file at exit"


def test_status_of_a_job_the_sidecar_does_not_know_says_so_and_fails() -> None:
    """As diagnose does: a script asking for one job must not read an empty
    table (exit 0) as that job being healthy."""
    with sidecar() as sc:
        r = ctl("status", "--job", "nosuchjob", "--target", sc.target)
        assert r.returncode == 1, r.stdout
        assert "no worker of job nosuchjob is known" in r.stderr
        assert r.stdout == "", r.stdout  # not "(no workers have reported)": others may have
        assert ctl("status", "--target", sc.target).returncode == 0  # no --job: empty is fine
        # top --once, the scriptable frame, alike (it printed an empty frame, exit 0).
        r = ctl("top", "--once", "--job", "nosuchjob", "--target", sc.target)
        assert r.returncode == 1 and "no worker of job nosuchjob is known" in r.stderr, r
        assert ctl("top", "--once", "--target", sc.target).returncode == 0


#: A flag of each ``trainprobe`` subcommand, to mistype (the test fails if a
#: subcommand is added without one here).
SUBCOMMAND_FLAG = {
    "status": "--job",
    "diagnose": "--target",
    "top": "--interval-s",
    "report": "--watch-s",
    "incidents": "--json",
    "run": "--replicas",
}


def mistyped(flag: str) -> str:
    """The flag with its last two letters swapped (``--job`` -> ``--jbo``)."""
    return flag[:-2] + flag[-1] + flag[-2]


def test_no_command_is_one_line_that_names_the_commands() -> None:
    """`trainprobe` alone, a new user's first try: which commands there are."""
    out = ctl()
    line = one_line(out.stderr)
    assert out.returncode == 2 and out.stdout == "", out
    assert line == (
        "trainprobe: error: which command? status, diagnose, top, report, incidents or run "
        "(see trainprobe --help)"
    ), line


def test_every_commands_help_says_what_it_does_and_what_its_job_flag_means(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``trainprobe status --help`` and the others began with their flags, nothing
    said what the command does; every one's --job spoke of diagnose; and run's
    usage did not show where its command goes. (In this process: the entry point's
    own main, a second each spared.)"""
    for cmd in SUBCOMMAND_FLAG:
        with pytest.raises(SystemExit) as done:
            ctl_main([cmd, "--help"])
        out = capsys.readouterr().out
        assert done.value.code == 0, (cmd, out)
        # What argparse prints between the usage and the first list: the description.
        head = re.split(r"\n(?:positional arguments|options):\n", out, maxsplit=1)[0]
        about = head.split("\n\n", 1)[1].strip() if "\n\n" in head else ""
        assert about, f"trainprobe {cmd} --help says nothing of what it does:\n{out}"
        flat = " ".join(out.split())
        if cmd in ("status", "top"):
            assert "(default: every job)" in flat and "diagnose" not in flat, (cmd, flat)
        if cmd == "report":  # a page is of one job: it never shows every job
            assert "knows one job)" in flat and "every job" not in flat, flat
        if cmd == "run":  # argparse's own usage ended in "...", never saying the "--"
            assert out.startswith("usage: trainprobe run [options] -- COMMAND"), out


def test_a_mistyped_flag_is_one_line_with_a_suggestion_in_every_command() -> None:
    usage = ctl("--help").stdout
    commands = usage[usage.index("{") + 1 : usage.index("}")].split(",")
    assert sorted(commands) == sorted(SUBCOMMAND_FLAG)
    base = [PYTHON, "-m", "trainprobe.sidecar.cli.ctl"]
    runs = {
        (f"trainprobe {cmd}", flag): [*base, cmd, mistyped(flag), "1"]
        for cmd, flag in SUBCOMMAND_FLAG.items()
    }
    runs["trainprobe-sidecar", "--hang-patience-s"] = [
        PYTHON, "-m", "trainprobe.sidecar", "--hang-patiense-s", "5"
    ]  # fmt: skip
    runs["trainprobe", "status"] = [*base, "stauts"]
    runs["trainprobe", "sidecar"] = [*base, "sidecar", "--help"]  # a command of its own
    runs["trainprobe-sidecar", ""] = [PYTHON, "-m", "trainprobe.sidecar", "--zzz"]
    # All at once: each is a fresh interpreter importing the CLI.
    procs = {
        key: subprocess.Popen(
            cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for key, cmd in runs.items()
    }
    for (prog, right), proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and out == "", (prog, right, out, err)
        line = one_line(err)
        assert line.startswith(f"{prog}: error: "), line
        if right == "status":
            assert "invalid choice: 'stauts'" in line and line.endswith("(did you mean status?)")
        elif right == "sidecar":
            assert "invalid choice: 'sidecar'" in line, line
            assert line.endswith("(the sidecar is a command of its own: trainprobe-sidecar)"), line
        elif right:
            typo = "--hang-patiense-s" if prog == "trainprobe-sidecar" else mistyped(right)
            assert line == f"{prog}: error: unknown flag {typo} (did you mean {right}?)", line
        else:  # nothing near: where to look instead
            assert line == f"{prog}: error: unknown flag --zzz (see {prog} --help)", line


def test_report_of_a_job_neither_the_sidecar_nor_the_log_knows_says_so_and_fails() -> None:
    """A mistyped --job (a name as `status` shows it has a start time in it)
    wrote an empty page and exited 0, after the 10 s of sampling."""
    with sidecar() as sc:
        out = sc.workdir / "page"
        r = ctl(
            "report", "--job", "nosuchjob", "--target", sc.target, "--watch-s", "0",
            "--log", str(sc.workdir / "none.jsonl"), "--out", str(out),
        )  # fmt: skip
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
        line = one_line(r.stderr)
        assert "no job 'nosuchjob'" in line and "trainprobe status" in line, line
        assert not out.exists()


def test_run_of_a_command_that_does_not_exist_is_one_line_before_anything_starts() -> None:
    """It started the lighthouse, then died in a traceback (FileNotFoundError)."""
    r = ctl("run", "--no-sidecar", "--", "nosuchcommand-trainprobe-test", "x.py", timeout=30)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 127, (r.returncode, r.stderr)
    line = one_line(r.stderr)
    assert "nosuchcommand-trainprobe-test" in line and "not found" in line, line
    assert "lighthouse" not in r.stdout, r.stdout


def test_ray_per_node_with_a_ray_address_nothing_answers_is_one_line_at_once() -> None:
    """It retried in Ray's own C++ warnings for minutes (ray.init's), where the
    stand-alone sidecar's --ray-address is probed first; no Ray is started."""
    from tests.ray_support import ray_environment

    closed = f"127.0.0.1:{free_port()}"  # nothing listens there
    with ray_environment():
        try:
            r = sidecar_cli("--ray-per-node", "--ray-address", closed)
        except subprocess.TimeoutExpired:
            pytest.fail("trainprobe-sidecar --ray-per-node waited on an unreachable Ray")
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, (r.returncode, r.stderr)
    line = one_line(r.stderr)
    assert line.startswith("trainprobe-sidecar: error:") and closed in line, line
    assert "not reachable" in line, line

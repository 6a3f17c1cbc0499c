"""Developer sessions: `nox -s tests`, `lint`, `transformers_matrix`, `matrix`, `coverage`, `bench`,
`peft`.

Every session installs torch==2.13.0 first so pip takes the local CPU wheel, never a CUDA build.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["tests"]
TORCH = "torch==2.13.0"


def _install(session: nox.Session, *extra: str) -> None:
    session.install(TORCH)
    session.install("-e", ".[test]", *extra)


@nox.session
def tests(session: nox.Session) -> None:
    """The README's test command."""
    _install(session)
    session.run("pytest", *session.posargs)


LINTED = ("tinykit", "tests", "benchmarks")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check and mypy, as configured in pyproject.toml."""
    _install(
        session
    )  # ruff and mypy come with the test extra; mypy reads installed packages' hints
    session.run("ruff", "check", *LINTED)
    session.run("ruff", "format", "--check", *LINTED)
    session.run("mypy", "tinykit")


@nox.session
@nox.parametrize("transformers", ["5.23.0", "5.24.0"])
def transformers_matrix(session: nox.Session, transformers: str) -> None:
    """The shrinker's tests against several transformers releases."""
    _install(session, f"transformers=={transformers}")
    session.run(
        "pytest", "tests/test_make_tiny_hub_files.py", "tests/test_layer_plans.py", *session.posargs
    )


@nox.session
def matrix(session: nox.Session) -> None:
    """The shrinker's tests under the latest patch of every transformers minor since the floor.

    One session, one base environment: `tinykit matrix` swaps only transformers per version
    (cached overlays), and prints a markdown table; `nox -s matrix -- --since 5.20` narrows it.
    """
    _install(session)
    since = (
        session.posargs[session.posargs.index("--since") + 1]
        if "--since" in session.posargs
        else "5.0"
    )
    session.run(
        "tinykit", "matrix", "transformers", "--since", since, "--",
        "python", "-m", "pytest", "-q", "-x",
        "tests/test_make_tiny_hub_files.py", "tests/test_layer_plans.py",
    )  # fmt: skip


@nox.session
def coverage(session: nox.Session) -> None:
    """`tinykit coverage`: every text model type (`-- --all`: every type with a model class)."""
    _install(session)
    session.run("tinykit", "coverage", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmark in benchmarks/."""
    _install(session)
    for script in sorted(__import__("pathlib").Path("benchmarks").glob("*.py")):
        session.run("python", str(script))


@nox.session
def peft(session: nox.Session) -> None:
    """PEFT 0.21.2's own tests against stand-ins (tests/clients/peft.sh): the IA3 ids, and with
    `-- N` also the first N ids of the fixed LoRA sample (`nox -s peft -- 300`)."""
    _install(session)
    env = {"PEFT_LORA_SAMPLE": session.posargs[0]} if session.posargs else {}
    session.run("bash", "tests/clients/peft.sh", env=env, external=True)


@nox.session
def setfit(session: nox.Session) -> None:
    """SetFit 1.2.0's own tests against stand-ins drafted by `standins discover`
    (tests/clients/setfit.sh); `-- FILE...` runs other files of its sdist."""
    _install(session)
    env = {"SETFIT_FILES": " ".join(session.posargs)} if session.posargs else {}
    session.run("bash", "tests/clients/setfit.sh", env=env, external=True)

"""`gagar sandbox`, `gagar images build` and `gagar env build`: argument parsing over the sandbox API."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from grader.cli.options import command_group
from grader.sandbox.base import BACKENDS, Limits
from grader.sandbox.local import LEVELS


def register(subparsers: Any) -> None:
    """Add the `sandbox`, `images` and `env` commands to the top-level parser's subparsers."""
    actions = command_group(subparsers, "sandbox", "run a command on a group's trees, isolated")

    run = actions.add_parser(
        "exec",
        help="run COMMAND on TARGET (base or a trajectory id) of a group; prints the result as JSON and "
        "exits with the command's own status",
        description="Runs one command on a group's tree in a sandbox and prints its result (exit code, "
        "output, time) as JSON. The exit status is the command's own (124 when it ran past --timeout); "
        "3 when the sandbox cannot run it. Options may come before or after TARGET; the command comes "
        "last, after -- (or from the first word that is not an option).",
    )
    run.add_argument("group_file", type=Path)
    run.add_argument("target", help='"base" or a trajectory id')
    _add_exec_options(run)
    # argparse cannot take options between positionals and a `--` list: take the rest raw, split it ourselves.
    run.add_argument(
        "rest", nargs=argparse.REMAINDER, metavar="[OPTIONS] [--] COMMAND...",
        help="one word is a shell command line (run by sh -c), several are an argv",
    )  # fmt: skip
    run.set_defaults(func=_cmd_exec)

    cleanup = actions.add_parser(
        "cleanup", help="remove sandbox containers and temp dirs left by dead graders"
    )
    cleanup.add_argument("--all", action="store_true", help="remove every sandbox's, running graders' too")
    cleanup.set_defaults(func=_cmd_cleanup)

    image_actions = command_group(subparsers, "images", "sandbox images")
    build = image_actions.add_parser(
        "build", help="build gagar/python and gagar/minimal (offline if need be)"
    )
    build.add_argument(
        "--offline",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="never pull (--offline), or never fall back to debootstrap (--no-offline); default: both",
    )
    build.add_argument("--force", action="store_true", help="rebuild even when up to date")
    build.set_defaults(func=_cmd_images_build)

    env_actions = command_group(subparsers, "env", "task environment layers")
    prebuild = env_actions.add_parser(
        "build",
        help="build the environment layers of the groups' tasks ahead of grading, with a summary",
        description="Builds each distinct layer once; exit 1 when any failed (the others are still built).",
    )
    prebuild.add_argument("group_files", nargs="+", type=Path)
    prebuild.add_argument("--group", action="append", help="only this group id (repeatable)")
    prebuild.add_argument("--retry", action="store_true", help="build layers whose earlier build failed")
    prebuild.add_argument("--force", action="store_true", help="rebuild layers that are already there")
    prebuild.add_argument("--timeout", type=float, help="seconds one layer's build may take (default 1800)")
    prebuild.set_defaults(func=_cmd_env_build)


def _add_exec_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--group", help="the group's id, when the file holds several")
    parser.add_argument(
        "--backend",
        choices=BACKENDS.names(),
        default="docker",
        help="docker: a container (default); local: this machine, in namespaces",
    )
    parser.add_argument(
        "--isolation",
        choices=("auto", *LEVELS),
        help="local backend only: how the command is isolated (default: auto, the strongest level this "
        "machine offers)",
    )
    parser.add_argument(
        "--image", help="Docker image to run in (default: the task's own image, else gagar/python)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=f"longest the command may run (default: {Limits().timeout:g} seconds)",
    )


_TAKES_VALUE = ("--group", "--backend", "--isolation", "--image", "--timeout")


def _split_rest(args: argparse.Namespace) -> list[str]:
    """Parse the options found after TARGET into `args` and return the command's argv: everything after
    `--`, else everything from the first word that is not one of `sandbox exec`'s options."""
    rest = list(args.rest)
    options: list[str] = []
    index = 0
    while index < len(rest):
        word = rest[index]
        if word == "--":
            index += 1
            break
        name = word.split("=", 1)[0]
        if name not in _TAKES_VALUE:
            break
        taken = 1 if "=" in word else 2
        options += rest[index : index + taken]
        index += taken
    if options:
        late = argparse.ArgumentParser(prog="gagar sandbox exec", add_help=False)
        _add_exec_options(late)
        parsed = late.parse_args(options)
        for name, value in vars(parsed).items():
            if value != late.get_default(name):
                setattr(args, name, value)
    return rest[index:]


def exit_status(result: Any) -> int:
    """The status `sandbox exec` exits with for a command's result: its own exit code, 124 when it was
    stopped at its timeout (as timeout(1) does), 128 + N when signal N ended it."""
    if result.timed_out:
        return 124
    code = int(result.exit_code)
    if code < 0:
        return 128 + (-code)
    return code if code <= 255 else 255


def _cmd_exec(args: argparse.Namespace) -> int:
    from grader.errors import EnvironmentBuildError
    from grader.groups.formats import load_group_file
    from grader.sandbox import SandboxError, open_sandbox
    from grader.workspace.workspace import open_workspace

    argv = _split_rest(args)
    if not argv:
        raise ValueError("no command given: gagar sandbox exec GROUP_FILE TARGET [OPTIONS] -- COMMAND...")
    groups = load_group_file(args.group_file)
    if args.group is not None:
        groups = [g for g in groups if g.group_id == args.group]
        if not groups:
            raise ValueError(f"{args.group_file} has no group {args.group!r}")
    if len(groups) != 1:
        ids = ", ".join(g.group_id for g in groups)
        raise ValueError(f"{args.group_file} holds {len(groups)} groups ({ids}); pick one with --group")
    group = groups[0]
    limits = Limits()
    if args.timeout:  # the container lives long enough for the one command asked for
        lifetime = max(limits.lifetime, args.timeout + limits.command_bound)
        limits = Limits(timeout=args.timeout, lifetime=lifetime)
    image = args.image or (group.task.image if args.backend == "docker" else None)
    try:
        with open_workspace(group) as ws:
            if args.target not in ws.targets():
                raise ValueError(f"no target {args.target!r}; the group has {', '.join(ws.targets())}")
            image = _task_image(group, ws, args.backend, image)
            with open_sandbox(
                ws,
                backend=args.backend,
                image=image,
                setup=group.task.setup,
                test_command=group.task.test_command,
                limits=limits,
                isolation=args.isolation,
            ) as sandbox:
                result = sandbox.exec(args.target, argv if len(argv) > 1 else argv[0])
    except (SandboxError, EnvironmentBuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    print(json.dumps(result.to_dict(), indent=2))
    return exit_status(result)


def _task_image(group: Any, workspace: Any, backend: str, image: str | None) -> str | None:
    """The image `sandbox exec` runs in: the one given, else the task's environment layer."""
    from grader.sandbox.environments import environment_for, not_built_note, spec_for_task
    from grader.sandbox.prebuild import needs_layer

    if image is not None or not needs_layer(group):
        return image
    task = group.task
    if backend != "docker":
        print(f"note: {not_built_note(backend, task.python)}", file=sys.stderr)
        return None
    layer = environment_for(workspace, spec_for_task(task.repo, task.python, task.environment))
    if layer.note:
        print(f"note: {layer.note}", file=sys.stderr)
    return layer.tag


def _cmd_cleanup(args: argparse.Namespace) -> int:
    from grader.sandbox.leftovers import cleanup_leftovers

    removed = cleanup_leftovers(everything=args.all)
    for name in removed:
        print(name)
    print(f"removed {len(removed)}", file=sys.stderr)
    return 0


def _cmd_images_build(args: argparse.Namespace) -> int:
    import logging

    from grader.sandbox.images import ImageBuildError, build_images

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        built = build_images(offline=args.offline, force=args.force)
    except ImageBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    for image in built:
        state = f"built in {image.seconds:.0f} s" if image.built else "up to date"
        print(f"{image.tag} {image.content_hash} {state}")
    return 0


def _cmd_env_build(args: argparse.Namespace) -> int:
    from grader.groups.formats import load_group_file
    from grader.groups.models import complete_group
    from grader.sandbox.prebuild import needs_layer, prebuild, summary_line

    groups = [complete_group(g) for path in args.group_files for g in load_group_file(path)]
    if args.group:
        missing = set(args.group) - {g.group_id for g in groups}
        if missing:
            raise ValueError(
                f"no group {', '.join(sorted(missing))} in {', '.join(map(str, args.group_files))}"
            )
        groups = [g for g in groups if g.group_id in set(args.group)]
    skipped = sum(1 for g in groups if not needs_layer(g))
    outcomes = prebuild(
        groups,
        retry=args.retry,
        force=args.force,
        timeout=args.timeout,
        on_layer=lambda outcome: print(summary_line(outcome), flush=True),
    )
    counts = {
        status: sum(1 for o in outcomes if o.status == status) for status in ("built", "reused", "failed")
    }
    print(
        f"{len(outcomes)} layer(s) for {len(groups) - skipped} group(s): {counts['built']} built, "
        f"{counts['reused']} reused, {counts['failed']} failed; {skipped} group(s) need no layer"
    )
    return 1 if counts["failed"] else 0

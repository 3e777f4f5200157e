"""`ditto`: drive a Jupyter server's runtime API from a shell.

    ditto runtimes
    ditto runtime RUNTIME
    ditto checkpoints RUNTIME [--limit N] [--cursor CHECKPOINT] [--newest-first]
    ditto checkpoint RUNTIME [--name NAME] [-m KEY=VALUE ...]
    ditto checkout CHECKPOINT [--runtime RUNTIME] [--conversation PATH] [--sender NAME] [--count N]
    ditto restore RUNTIME CHECKPOINT
    ditto diff [A [B]] [--runtime RUNTIME]
    ditto compare RUNTIME[@REF] RUNTIME[@REF] ...
    ditto keep RUNTIME
    ditto undo RUNTIME
    ditto pause RUNTIME [--name NAME] | resume RUNTIME | close RUNTIME [--discard]
    ditto delete-snapshot CHECKPOINT [--runtime RUNTIME]
    ditto doctor [--data-dir DIR] [--store-url URL]
    ditto budget RUNTIME

`ditto checkpoints` lists every checkpoint (fetched page by page); with `--limit` it shows
one page and says how to get the next (`--cursor`).

`ditto diff A B` compares two checkpoints (B may be `live`: the runtime's kernel, files and
saved notebook now): variables, files (with text diffs of small files) and cells; B is
looked up in A's runtime unless it names its own (`RUNTIME:NAME`); `ditto
diff A` compares A with its parent, `ditto diff --runtime RUNTIME` the head with `live`.
`ditto compare A B C ...` shows 2 to 8 points in time side by side (variables, files and
cells; `*` marks what differs): each a runtime, at `@REF` (a checkpoint of that runtime, or
`@live`), else the runtime now when it is live and its head when not. `ditto keep RUNTIME`
keeps one child of a fan-out (`checkout --count N`) and closes the others, asking nothing
(their checkpoints stay).
`ditto undo RUNTIME` rolls a runtime back to just before the last cell `%autocheckpoint`
recorded (variables and workspace files).

CHECKPOINT is a full id, a unique id prefix (the 12 characters `ditto checkpoints` prints
will do) or a name: within RUNTIME when one is given (`--runtime RUNTIME`, restore's
RUNTIME, or `RUNTIME:NAME`), else looked up across every runtime. The server resolves it
and the command then runs on the full id.

The global flags `--url`, `--token`, `--json` and `--timeout` go before or after the
command. The server is `--url`/`--token`, else `DITTO_SERVER_URL`/`DITTO_TOKEN`, else the
running Jupyter server found the way `jupyter server list` finds it. Output is for people
by default, `--json` prints the server's JSON. Exit codes: 0 done, 2 usage error, 3 the
server refused the operation (a 4xx answer: unknown or ambiguous checkpoint included), 4
server or connection error (5xx, unreachable, no server found).

`ditto doctor` needs no server: it reads the data directory itself (`--data-dir`, default
the server's) and checks the store's rows, the chunks' hashes and the manifests'
signatures and contents (`ditto_jupyter.control.doctor`). It exits 0 when all is well, 1
when it found damage (each damaged row, chunk, manifest or checkpoint named by id) or a
full disk (said as such, with the space left), 4 when there is no data directory or store
to check.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from ditto_jupyter.client import (
    EXIT_OK,
    EXIT_SERVER,
    EXIT_USAGE,
    PAGE_SIZE,
    CliError,
    RuntimeClient,
    UsageError,
    api_path,
    find_server,
    parse_metadata,
    split_reference,
)

if TYPE_CHECKING:
    from ditto_jupyter.control.doctor import DoctorReport

#: Exit code of `ditto doctor` when it found something damaged.
EXIT_DAMAGED = 1


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _table(rows: list[list[str]], headers: list[str], out: TextIO) -> None:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(), file=out)
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)


def _runtime_line(runtime: dict[str, Any]) -> str:
    return f"{runtime['runtime_id']} ({runtime['status']}, {runtime['conversation_id']})"


def _checked_out(result: dict[str, Any], out: TextIO) -> None:
    """The lines of one checkout child."""
    print(
        f"checked out {result['checkpoint_id']} into {_runtime_line(result['runtime'])}", file=out
    )
    for key, label in (
        ("kernel_id", "kernel "),
        ("notebook_path", "notebook "),
        ("notebook_note", ""),
    ):
        if result.get(key):
            print(f"  {label}{result[key]}", file=out)
    _not_restored(result, out)


def _not_restored(result: dict[str, Any], out: TextIO) -> None:
    """One line per value the runtime's kernel does not hold after the operation."""
    for value in result.get("unrestorable", []):
        print(f"  not restored: {value['name']} ({value['type']}): {value['reason']}", file=out)


def render(command: str, result: Any, out: TextIO) -> None:
    """Human output of one command's result."""
    if command == "runtimes":
        rows = [
            [
                r["runtime_id"],
                r["status"],
                r["conversation_id"],
                r["sender_id"],
                _when(r["updated_at_ms"]),
            ]
            for r in result["runtimes"]
        ]
        if not rows:
            print("no runtimes", file=out)
            return
        _table(rows, ["RUNTIME", "STATUS", "CONVERSATION", "SENDER", "UPDATED"], out)
    elif command == "runtime":
        print(_runtime_line(result), file=out)
    elif command == "checkpoints":
        rows = [
            [
                c["checkpoint_id"][:12],
                c["name"] or "",
                (c["parent_checkpoint_id"] or "")[:12],
                _when(c["created_at_ms"]),
                "yes" if c["has_provider_snapshot"] else "no",
                ", ".join(u["name"] for u in c["unrestorable"]),
            ]
            for c in result["checkpoints"]
        ]
        if not rows:
            print("no checkpoints", file=out)
            return
        _table(rows, ["CHECKPOINT", "NAME", "PARENT", "CREATED", "SNAPSHOT", "UNRESTORABLE"], out)
        if result.get("next_cursor"):
            print(f"more follow: --cursor {result['next_cursor']}", file=out)
    elif command == "checkpoint":
        previous = result["previous_checkpoint_id"]
        tail = f" (previous {previous})" if previous else ""
        print(
            f"checkpoint {result['checkpoint_id']} of {_runtime_line(result['runtime'])}{tail}",
            file=out,
        )
    elif command == "checkout":
        children = result.get("children") or []
        for child in children if len(children) > 1 else [{"checkout": result}]:
            if child["checkout"] is None:
                print(
                    f"child {child['index']} failed: {child['error']}: {child['message']}", file=out
                )
                continue
            _checked_out(child["checkout"], out)
    elif command == "restore":
        print(
            f"restored {result['checkpoint_id']} into {_runtime_line(result['runtime'])}", file=out
        )
        _not_restored(result, out)
    elif command == "pause":
        print(
            f"paused {_runtime_line(result['runtime'])} at checkpoint {result['checkpoint_id']}",
            file=out,
        )
    elif command == "resume":
        kernel = f", kernel {result['kernel_id']}" if result.get("kernel_id") else ""
        print(
            f"resumed {_runtime_line(result['runtime'])} from {result['checkpoint_id']}{kernel}",
            file=out,
        )
        _not_restored(result, out)
    elif command == "close":
        extra = ", provider sandbox deleted" if result["provider_sandbox_deleted"] else ""
        final = result.get("checkpoint_id")
        extra += f", final checkpoint {final}" if final else ""
        print(f"closed {_runtime_line(result['runtime'])}{extra}", file=out)
    elif command == "budget":
        for line in budget_lines(result):
            print(line, file=out)
    elif command == "diff":
        from ditto_jupyter.control.diff.report import diff_text
        from ditto_jupyter.core.models import RuntimeDiffResult

        print(diff_text(RuntimeDiffResult.model_validate(result, strict=False)), file=out)
    elif command == "compare":
        from ditto_jupyter.control.diff.side_by_side_report import compare_text
        from ditto_jupyter.core.models import RuntimeCompareResult

        print(compare_text(RuntimeCompareResult.model_validate(result, strict=False)), file=out)
    elif command == "keep":
        closed = ", ".join(result["closed"]) or "none"
        print(f"kept {result['kept']}; closed {closed}", file=out)
        for failed in result["failed"]:
            print(
                f"not closed {failed['runtime_id']}: {failed['error']}: {failed['message']}",
                file=out,
            )
    elif command == "undo":
        cell = result["undone_cell"]
        print(
            f"undid cell {cell['execution_count']} of {_runtime_line(result['runtime'])}: back "
            f"at checkpoint {result['checkpoint_id']}",
            file=out,
        )
        _not_restored(result, out)
    elif command == "delete-snapshot":
        state = "deleted" if result["deleted"] else "already deleted"
        print(f"snapshot of checkpoint {result['checkpoint_id']}: {state}", file=out)


def render_doctor(report: DoctorReport, out: TextIO) -> None:
    """Human output of `ditto doctor`: what was checked, then each finding by id."""
    print(
        f"checked: {report.rows_checked} store rows, {report.chunks_checked} chunks, "
        f"{report.manifests_checked} manifests, {report.checkpoints_checked} checkpoints",
        file=out,
    )
    for finding in report.findings:
        damaged = "" if finding.part == "disk" else f"damaged {finding.part} "
        print(f"{damaged}{finding.id}: {finding.problem}", file=out)
    for left in report.leftovers:
        runtime = f" of runtime {left.runtime_id}" if left.runtime_id else ""
        print(
            f"left behind {left.kind} {left.resource_id}{runtime} ({_when(left.created_at_ms)}): "
            f"{left.reason}",
            file=out,
        )
    if report.healthy:
        print("no damage found", file=out)
    else:
        print(f"{len(report.findings)} problems found", file=out)
    if report.leftovers:
        print(f"{len(report.leftovers)} resources left behind: free them by hand", file=out)


def doctor(args: argparse.Namespace, out: TextIO) -> int:
    """Run `ditto doctor`; its exit code."""
    # Imported here: the store and blob-store stack is not needed by the other commands.
    from ditto_jupyter.wiring import DataDirError, check_data_dir

    try:
        report = check_data_dir(args.data_dir, store_url=args.store_url)
    except DataDirError as error:
        print(f"ditto: doctor: {error}", file=sys.stderr)
        return EXIT_SERVER
    if args.json:
        print(json.dumps({**report.model_dump(), "healthy": report.healthy}, indent=2), file=out)
    else:
        render_doctor(report, out)
    return EXIT_OK if report.healthy else EXIT_DAMAGED


def budget_lines(result: dict[str, Any]) -> list[str]:
    """`ditto budget`'s output: whose budget, its figures, admission, records by status."""
    budget = result["budget"]
    if budget is None:
        return [f"runtime {result['runtime_id']} has no token budget (set one with %budget LIMIT)"]
    owner = f"runtime {budget['owner_runtime_id']}"
    if budget["inherited"]:
        owner += f" (shared with checkout {result['runtime_id']})"
    admission = f"closed: {budget['closed_reason']}" if budget["closed"] else "open"
    statuses = ", ".join(f"{status} {count}" for status, count in budget["by_status"].items())
    return [
        f"token budget of {owner}",
        f"  limit {budget['limit']:,}, charged {budget['charged']:,}, reserved "
        f"{budget['reserved']:,}, remaining {budget['remaining']:,}, replayed "
        f"{budget['replayed']:,} (not charged)",
        f"  admission {admission}",
        f"  records {budget['records']:,}" + (f" ({statuses})" if statuses else ""),
        *_branch_lines(budget),
    ]


def _branch_lines(budget: dict[str, Any]) -> list[str]:
    """Each branch of a budget drawn on by several runtimes, its cap and its refusals."""
    branches = budget.get("branches") or []
    if len(branches) < 2 and budget.get("each") is None and not budget.get("refusals"):
        return []
    each = budget.get("each")
    lines = [
        f"  each branch at most {each:,} tokens" if each else "  no cap per branch",
        f"  refusals {budget.get('refusals', 0):,}",
    ]
    for branch in branches:
        lines.append(
            f"  branch {branch['branch'] or '(unrecorded)'}: charged {branch['charged']:,}, "
            f"reserved {branch['reserved']:,}, refused {branch['refused']:,}"
        )
    return lines


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"ditto: usage error: {message}\n")


def _add_global_flags(parser: argparse.ArgumentParser, *, with_defaults: bool) -> None:
    """--url, --token, --json, --timeout.

    Every command's parser has them too, defaulting to SUPPRESS there, so a flag given
    before the command is kept and one given after it is taken: any position works.
    """

    def default(value: object) -> object:
        return value if with_defaults else argparse.SUPPRESS

    parser.add_argument(
        "--url",
        default=default(None),
        help="server URL with base_url (default: $DITTO_SERVER_URL or the running server)",
    )
    parser.add_argument(
        "--token",
        default=default(None),
        help="server token (default: $DITTO_TOKEN or the running server's)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print the server's JSON answer",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        default=default(600.0),
        help="seconds to wait for an answer",
    )


def _page_size(text: str) -> int:
    """A --limit: a whole number from 1 to the server's largest page."""
    try:
        size = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= size <= PAGE_SIZE:
        raise argparse.ArgumentTypeError(f"{size} is not between 1 and {PAGE_SIZE}")
    return size


_CHECKPOINT_HELP = "checkpoint id, unique id prefix, name, or RUNTIME:NAME"
_RUNTIME_HELP = "look CHECKPOINT up (id prefix or name) in this runtime only"


def build_parser() -> argparse.ArgumentParser:
    """The `ditto` argument parser: global flags, then one sub-parser per command."""
    parser = _Parser(
        prog="ditto", description="Checkpoint, branch and pause live Jupyter runtimes."
    )
    _add_global_flags(parser, with_defaults=True)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        # argparse formats help as a %-template (`%(default)s`): a magic's `%` is literal.
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_text.replace("%", "%%"))
        _add_global_flags(p, with_defaults=False)
        return p

    def metadata(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "-m", "--metadata", action="append", metavar="KEY=VALUE", help="metadata (repeatable)"
        )

    command("runtimes", "list runtimes (live Jupyter sessions included)")
    p = command("runtime", "show one runtime")
    p.add_argument("runtime")
    p = command("checkpoints", "list a runtime's checkpoints")
    p.add_argument("runtime")
    p.add_argument(
        "--limit", type=_page_size, metavar="N", help=f"show one page of N (1-{PAGE_SIZE})"
    )
    p.add_argument("--cursor", metavar="CHECKPOINT", help="start after this one (with --limit)")
    p.add_argument("--newest-first", action="store_true", help="newest first")
    p = command("checkpoint", "checkpoint an idle runtime")
    p.add_argument("runtime")
    p.add_argument("--name")
    metadata(p)
    p = command("checkout", "branch a new runtime from a checkpoint")
    p.add_argument("checkpoint", help=_CHECKPOINT_HELP)
    p.add_argument("--runtime", help=_RUNTIME_HELP)
    p.add_argument("--conversation", help="conversation (notebook path) of the new runtime")
    p.add_argument("--sender", help="sender of the new runtime")
    p.add_argument("--count", type=int, default=1, help="how many children, 1 to 20 (default 1)")
    metadata(p)
    p = command("restore", "restore a checkpoint into an idle runtime, in place")
    p.add_argument("runtime")
    p.add_argument("checkpoint", help="checkpoint id, unique id prefix or name in RUNTIME")
    p = command("diff", "compare two checkpoints, or a checkpoint and the live runtime")
    p.add_argument("a", nargs="?", metavar="A", help=_CHECKPOINT_HELP + " (default: the head)")
    p.add_argument(
        "b", nargs="?", metavar="B", help="another checkpoint, or live (default: A's parent)"
    )
    p.add_argument("--runtime", help=_RUNTIME_HELP)
    p = command("compare", "show 2 to 8 runtimes or checkpoints side by side")
    p.add_argument("sides", nargs="+", metavar="RUNTIME[@REF]", help="a runtime, at REF or live")
    p = command("keep", "keep one child of a fan-out and close the others (checkpoints stay)")
    p.add_argument("runtime")
    p = command("undo", "roll a runtime back to just before its last cell (%autocheckpoint)")
    p.add_argument("runtime")
    p = command("pause", "snapshot a runtime and free its kernel")
    p.add_argument("runtime")
    p.add_argument("--name")
    metadata(p)
    p = command("resume", "resume a paused runtime under the same id")
    p.add_argument("runtime")
    metadata(p)
    p = command("close", "close a runtime for good (checkpoints stay)")
    p.add_argument("runtime")
    p.add_argument(
        "--discard",
        action="store_true",
        help="close without a final checkpoint: what changed since the last one is lost",
    )
    p = command("delete-snapshot", "delete the provider snapshot of a checkpoint")
    p.add_argument("checkpoint", help=_CHECKPOINT_HELP)
    p.add_argument("--runtime", help=_RUNTIME_HELP)
    p = command("doctor", "check the local data directory: store rows, blobs, manifests")
    p.add_argument(
        "--data-dir",
        help="data directory (default: $DITTO_DATA_DIR, else ~/.local/share/ditto-jupyter)",
    )
    p.add_argument("--store-url", help="the server's store_url, when it has one")
    p = command("budget", "show the token budget a runtime counts against (%budget)")
    p.add_argument("runtime")
    return parser


def diff_body(args: argparse.Namespace, client: RuntimeClient) -> dict[str, Any]:
    """The body of `ditto diff`: A and B resolved to full ids (B `live` as it is), A's
    parent when B is not given, the head and `live` when neither is."""
    if args.a is None:
        if args.runtime is None:
            raise UsageError("ditto diff needs a checkpoint A, or --runtime RUNTIME")
        return {"runtime_id": args.runtime, "from": None, "to": "live"}
    detail = client.checkpoint_detail(args.a, args.runtime)["checkpoint"]
    runtime_id = str(detail["runtime_id"])
    if args.b is None:
        parent = detail.get("parent_checkpoint_id")
        if parent is None:
            raise UsageError(f"checkpoint {args.a} has no parent: give B (a checkpoint, or live)")
        return {"runtime_id": runtime_id, "from": parent, "to": detail["checkpoint_id"]}
    if args.b == "live":
        return {"runtime_id": runtime_id, "from": detail["checkpoint_id"], "to": "live"}
    # B is looked up in A's runtime, unless it names its own (`RUNTIME:NAME`)
    owner, name = split_reference(args.b, args.runtime)
    other = client.resolve_checkpoint_id(name, owner or runtime_id)
    return {"runtime_id": runtime_id, "from": detail["checkpoint_id"], "to": other}


def run(args: argparse.Namespace, client: RuntimeClient) -> Any:
    """Send the request a parsed command stands for; the server's JSON answer.

    A checkpoint reference is resolved to its full id first (one GET), then the
    operation is sent with that id.
    """
    command = args.command
    if command == "runtimes":
        return client.get("")
    if command == "runtime":
        return client.get(api_path(args.runtime))
    if command == "checkpoints":
        if args.cursor is not None and args.limit is None:
            raise UsageError("--cursor needs --limit")
        return client.list_checkpoints(
            args.runtime, limit=args.limit, cursor=args.cursor, newest_first=args.newest_first
        )
    if command == "checkpoint":
        body = {
            "runtime_id": args.runtime,
            "name": args.name,
            "metadata": parse_metadata(args.metadata),
        }
        return client.post("checkpoint", body)
    if command == "checkout":
        body = {
            "checkpoint_id": client.resolve_checkpoint_id(args.checkpoint, args.runtime),
            "conversation_id": args.conversation,
            "sender_id": args.sender,
            "metadata": parse_metadata(args.metadata),
        }
        if args.count != 1:  # absent from a single checkout's body: older servers take it
            body["count"] = args.count
        return client.post("checkout", body)
    if command == "restore":
        checkpoint_id = client.resolve_checkpoint_id(args.checkpoint, args.runtime)
        return client.post("restore", {"runtime_id": args.runtime, "checkpoint_id": checkpoint_id})
    if command == "pause":
        body = {
            "runtime_id": args.runtime,
            "name": args.name,
            "metadata": parse_metadata(args.metadata),
        }
        return client.post("pause", body)
    if command == "resume":
        return client.post(
            "resume", {"runtime_id": args.runtime, "metadata": parse_metadata(args.metadata)}
        )
    if command == "close":
        return client.post("close", {"runtime_id": args.runtime, "discard": args.discard})
    if command == "budget":
        return client.get(api_path(args.runtime, "budget"))
    if command == "diff":
        return client.post("diff", diff_body(args, client))
    if command == "compare":
        sides = [side.partition("@") for side in args.sides]
        at = [{"runtime_id": rid, "at": ref if sep else None} for rid, sep, ref in sides]
        return client.post("compare", {"sides": at})
    if command == "keep":
        return client.post(api_path(args.runtime, "keep"), {})
    if command == "undo":
        return client.post("undo", {"runtime_id": args.runtime})
    if command == "delete-snapshot":
        checkpoint_id = client.resolve_checkpoint_id(args.checkpoint, args.runtime)
        return client.post("checkpoint/delete-snapshot", {"checkpoint_id": checkpoint_id})
    raise UsageError(f"unknown command {command!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `ditto` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "doctor":  # reads the data directory; no server involved
        return doctor(args, sys.stdout)
    try:
        parse_metadata(getattr(args, "metadata", None))
        url, token = find_server(args.url, args.token)
        client = RuntimeClient(url, token, timeout=args.timeout)
        try:
            result = run(args, client)
        finally:
            client.close()
    except CliError as error:
        if args.json and error.body is not None:
            print(json.dumps(error.body, indent=2))
        print(f"ditto: {error}", file=sys.stderr)
        return error.exit_code
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        render(args.command, result, sys.stdout)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

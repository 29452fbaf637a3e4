"""``leveret ctl`` as a Typer group with rabbitmqctl's command line.

rabbitmqctl takes its global options anywhere, before the verb and after it. Here they are
one table, ``SHARED``: the group's callback takes them before the verb and every verb takes
them again after it. Before the verb ``-p`` is the password (with ``--url`` and ``-u``, how
``leveret ctl`` reaches the management API); after it ``-p`` is the vhost, as in rabbitmqctl.
A verb's own option wins over a global one of the same name (``delete_queue -u`` is
``--if-unused``).

A verb is one function decorated with ``@verb``: its first parameter receives a ``Ctl`` (the
options in force and a management API client), the others are its arguments and options in
Typer's terms, and its docstring is its help::

    @verb("policies")
    def clear_policy(ctl: Ctl, name: str) -> None:
        "Clears a policy in the virtual host given by -p."
        ctl.banner(f'Clearing policy "{name}" on vhost "{ctl.opts.vhost}" ...')
        ...

Usage errors end as rabbitmqctl ends them: exit code 64 and its "(argument validation)" texts,
never click's exit 2 and wording. ``run`` maps them, and every ``CtlError`` a verb raises, to
one line on stderr."""

from __future__ import annotations

import inspect
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Concatenate, ParamSpec, TypeVar, get_args, get_origin

import typer

# Typer (0.26 on) vendors click and names its usage errors only there: these four are how a
# usage error tells which of rabbitmqctl's texts it is.
from typer._click.exceptions import BadOptionUsage, MissingParameter, NoSuchOption, UsageError
from typer.core import TyperGroup
from typer.models import OptionInfo

from leveret.cli.ctlclient import (
    EX_OK,
    EX_SOFTWARE,
    EX_USAGE,
    Client,
    Ctl,
    CtlError,
    HttpError,
    Options,
)

P = ParamSpec("P")
T = TypeVar("T")
Verb = Callable[Concatenate[Ctl, P], None]

PROG = "leveret ctl"
FORMATTERS = ("table", "json", "pretty_table")


def option_value(convert: Callable[[str], T], error: str) -> Callable[[str], T]:
    """An option's parser: ``convert`` the text given, or fail as rabbitmqctl's argument
    validation does, with ``error``."""

    def parse(value: str) -> T:
        try:
            return convert(value)
        except ValueError:
            raise CtlError(f"(argument validation): {error}", EX_USAGE) from None

    return parse


_timeout = option_value(float, "timeout must be a number")


def _formatter(value: str) -> str:
    if value not in FORMATTERS:
        raise CtlError(f"(argument validation): unknown formatter {value}", EX_USAGE)
    return value


def _set_formatter(opts: Options, value: str) -> None:
    opts.formatter = value
    opts.formatter_given = True  # verbs whose default is another formatter (streams)


def _field(name: str) -> Callable[[Options, Any], None]:
    return lambda opts, value: setattr(opts, name, value)


def _quiet(opts: Options, _: Any) -> None:
    opts.quiet = True


def _silent(opts: Options, _: Any) -> None:
    # rabbitmqctl's --silent is --quiet without the table header too
    opts.quiet = True
    opts.table_headers = False


def _no_table_headers(opts: Options, _: Any) -> None:
    opts.table_headers = False


def _accepted(opts: Options, _: Any) -> None:
    """rabbitmqctl's node options: accepted so its command lines run; Leveret is one node."""


@dataclass(frozen=True)
class Shared:
    """A global option: its names before and after the verb, and what it sets."""

    key: str
    before: tuple[str, ...]
    after: tuple[str, ...]
    help: str
    apply: Callable[[Options, Any], None]
    flag: bool = False
    parser: Callable[[str], Any] | None = None
    value_type: type = str
    metavar: str | None = None

    @property
    def param(self) -> str:
        return f"global_{self.key}"


SHARED: tuple[Shared, ...] = (
    Shared(
        "url",
        ("--url",),
        ("--url",),
        "Management API URL (default http://127.0.0.1:15672, or LEVERET_CTL_URL).",
        _field("url"),
        metavar="URL",
    ),
    Shared(
        "username",
        ("-u", "--username"),
        ("-u", "--username"),
        "User of the management API (default guest, or LEVERET_CTL_USERNAME).",
        _field("username"),
        metavar="USER",
    ),
    Shared(
        "password",
        ("-p", "--password"),
        ("--password",),
        "Password (default guest, or LEVERET_CTL_PASSWORD); -p only before the verb.",
        _field("password"),
        metavar="PASSWORD",
    ),
    Shared(
        "vhost",
        ("--vhost",),
        ("-p", "--vhost"),
        "Virtual host (default /); -p only after the verb.",
        _field("vhost"),
        metavar="VHOST",
    ),
    Shared("quiet", ("-q", "--quiet"), ("-q", "--quiet"), "No banners.", _quiet, flag=True),
    Shared(
        "silent",
        ("-s", "--silent"),
        ("-s", "--silent"),
        "No banners and no table header.",
        _silent,
        flag=True,
    ),
    Shared(
        "formatter",
        ("--formatter",),
        ("--formatter",),
        "table (default), json or pretty_table.",
        _set_formatter,
        parser=_formatter,
        metavar="FORMATTER",
    ),
    Shared(
        "no_table_headers",
        ("--no-table-headers",),
        ("--no-table-headers",),
        "No table header.",
        _no_table_headers,
        flag=True,
    ),
    Shared(
        "timeout",
        ("-t", "--timeout"),
        ("-t", "--timeout"),
        "Seconds to wait for the management API (default 60).",
        _field("timeout"),
        parser=_timeout,
        value_type=float,
        metavar="SECONDS",
    ),
    Shared(
        "node",
        ("-n", "--node"),
        ("-n", "--node"),
        "Accepted as rabbitmqctl's; Leveret is one node.",
        _accepted,
        metavar="NODE",
    ),
    Shared(
        "longnames",
        ("-l", "--longnames"),
        ("-l", "--longnames"),
        "Accepted as rabbitmqctl's; Leveret is one node.",
        _accepted,
        flag=True,
    ),
)


def _parameter(shared: Shared, names: tuple[str, ...]) -> inspect.Parameter:
    """A Typer option for ``shared`` under ``names``, as a parameter of a command function."""
    annotated: Any = Annotated
    if shared.flag:
        annotation = annotated[bool, typer.Option(*names, help=shared.help)]
        default: Any = False
    else:
        annotation = annotated[
            shared.value_type | None,
            typer.Option(
                *names,
                help=shared.help,
                parser=shared.parser,
                metavar=shared.metavar,
                show_default=False,
            ),
        ]
        default = None
    return inspect.Parameter(
        shared.param, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default
    )


def _apply(opts: Options, given: dict[str, Any], shared: list[Shared]) -> None:
    """Set what the command line gave (flags given are True, values given are not None)."""
    for s in shared:
        value = given.pop(s.param)
        if value is not None and value is not False:
            s.apply(opts, value)


def _option_names(annotation: Any) -> set[str]:
    """The option names a verb's own parameter declares (``typer.Option("-u", "--if-unused")``)."""
    if get_origin(annotation) is not Annotated:
        return set()
    names: set[str] = set()
    for meta in get_args(annotation)[1:]:
        if isinstance(meta, OptionInfo):
            decls = [meta.default, *(meta.param_decls or ())]
            names.update(d for d in decls if isinstance(d, str) and d.startswith("-"))
    return names


_CONTEXT = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)


class CtlGroup(TyperGroup):
    """The verbs' group: an unknown verb is rabbitmqctl's "Command 'x' not found."."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if self.get_command(ctx, args[0]) is None:
            raise CtlError(f"Command '{args[0]}' not found.", EX_USAGE, plain=True)
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=CtlGroup,
    name="ctl",
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": []},
)

# The verbs listed by `leveret ctl help`, a line (or more) for each group, in the order
# they were registered.
_LISTED: dict[str, list[str]] = {}


def verb(group: str | None, name: str | None = None) -> Callable[[Verb[P]], Verb[P]]:
    """Register ``fn`` as the verb ``name`` (default: the function's name), listed under
    ``group`` in the usage (None: not listed)."""

    def register(fn: Verb[P]) -> Verb[P]:
        verb_name = name or fn.__name__
        call: Callable[..., None] = fn  # called with the keyword arguments Typer parsed
        own = list(inspect.signature(fn, eval_str=True).parameters.values())[1:]
        taken = set().union(*(_option_names(p.annotation) for p in own))
        shared = [s for s in SHARED if any(n not in taken for n in s.after)]

        def command(ctx: typer.Context, **kwargs: Any) -> None:
            opts = ctx.ensure_object(Options)
            _apply(opts, kwargs, shared)
            if ctx.args:
                raise CtlError("(argument validation): too many arguments.", EX_USAGE)
            call(Ctl(opts, Client(opts)), **kwargs)

        # Typer reads a command's parameters from its signature: the Context, the verb's
        # own parameters, then the global options the verb does not shadow.
        params = [_CONTEXT, *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own)]
        params += [_parameter(s, tuple(n for n in s.after if n not in taken)) for s in shared]
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__doc__ = fn.__doc__
        app.command(
            verb_name,
            context_settings={"allow_extra_args": True, "help_option_names": ["--help"]},
        )(command)
        if group is not None:
            _LISTED.setdefault(group, []).append(verb_name)
        return fn

    return register


USAGE = """Usage: leveret ctl [--url URL] [-u USER] [-p PASSWORD] <command> [<command options>]

Talks to a running Leveret through its management API (default http://127.0.0.1:15672,
guest/guest; or LEVERET_CTL_URL, LEVERET_CTL_USERNAME, LEVERET_CTL_PASSWORD).

Options anywhere: -q/--quiet, --formatter table|json, --no-table-headers, -t/--timeout S.
After the command: -p/--vhost VHOST.

Commands:
"""


def usage() -> str:
    lines = [
        line
        for names in _LISTED.values()
        for line in textwrap.wrap(
            " ".join(names), width=90, initial_indent="  ", subsequent_indent="  "
        )
    ]
    return USAGE + "\n".join(lines) + "\n"


def _help(value: bool) -> None:
    if value:
        sys.stdout.write(usage())
        raise typer.Exit(EX_OK)


def _before_verb(ctx: typer.Context, **given: Any) -> None:
    """The group's callback: options before the verb; no verb at all is a usage error."""
    given.pop("show_help")
    _apply(ctx.ensure_object(Options), given, list(SHARED))
    if ctx.invoked_subcommand is None:
        sys.stderr.write(usage())
        raise typer.Exit(EX_USAGE)


_HELP = inspect.Parameter(
    "show_help",
    inspect.Parameter.KEYWORD_ONLY,
    annotation=Annotated[
        bool,
        typer.Option("-h", "--help", is_eager=True, callback=_help, help="Show the usage."),
    ],
    default=False,
)
_before_verb.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [_CONTEXT, _HELP, *(_parameter(s, s.before) for s in SHARED)]
)
app.callback(invoke_without_command=True)(_before_verb)


@verb(None, name="help")
def help_(ctl: Ctl, command: Annotated[str | None, typer.Argument()] = None) -> None:
    """How to use leveret ctl, or one of its verbs."""
    if command is None:
        sys.stdout.write(usage())
        return
    raise typer.Exit(run([command, "--help"], ctl.opts))


def _usage_error(exc: UsageError, argv: list[str]) -> CtlError:
    """click's usage errors as rabbitmqctl words them (exit code 64)."""
    if isinstance(exc, MissingParameter):
        text = "not enough arguments."
    elif isinstance(exc, NoSuchOption):
        text = f"invalid option {exc.option_name}"
    elif isinstance(exc, BadOptionUsage):
        # a value given to a flag (--quiet=x) or none given to an option that needs one
        if any(a.startswith(exc.option_name + "=") for a in argv):
            text = f"invalid option {exc.option_name}"
        else:
            text = f"option {exc.option_name} needs a value"
    else:
        text = exc.format_message()
    return CtlError(f"(argument validation): {text}", EX_USAGE)


def _report(exc: CtlError) -> int:
    sys.stdout.flush()
    sep = " " if exc.message.startswith("(") else ": "
    print(exc.message if exc.plain else f"Error{sep}{exc.message}", file=sys.stderr)
    return exc.code


def run(argv: list[str], opts: Options) -> int:
    """Run one ``leveret ctl`` command line; the exit code, as rabbitmqctl's."""
    command = typer.main.get_command(app)
    try:
        result = command.main(argv, prog_name=PROG, standalone_mode=False, obj=opts)
    except UsageError as exc:
        return _report(_usage_error(exc, argv))
    except CtlError as exc:
        return _report(exc)
    except HttpError as exc:
        sys.stdout.flush()
        print(f"Error: {exc.reason or exc}", file=sys.stderr)
        return EX_SOFTWARE
    # a verb returns None; typer.Exit(code) comes back as its code
    return result if isinstance(result, int) else EX_OK

"""The training command line before Hydra composes it, and where Hydra refuses it: the rewrites (`resume=DIR`,
an integer written as a float), the refusals that need no config (an unwritable run directory, SLURM where
there is none), and one line naming the key for a command line Hydra cannot read or compose (rl/train.py runs
these; none imports JAX or TensorFlow, so a bad command line fails in a fraction of a second)."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
# Where Hydra's override grammar (comma lists, range(), choice(), quoting) is described.
GRAMMAR_PAGE = "https://hydra.cc/docs/1.3/advanced/override_grammar/basic/"
# Hydra's arguments that print something and start no job.
INFORMATION = ("-h", "--help", "--hydra-help", "-c", "--cfg", "-i", "--info", "-sc", "--shell-completion")
# A number written as a float (1e5, 2.5e2, 100000.0).
_FLOAT_LITERAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
BRACKETS = {"(": ")", "[": "]", "{": "}"}


def is_multirun(argv: list[str]) -> bool:
    return any(arg in ("-m", "--multirun") for arg in argv)


def override_key(override: str) -> str:
    """The key an override sets: `agent.lr` of `agent.lr=1e-3`, `++seed=3` and `~seed`."""
    return override.split("=", 1)[0].lstrip("+~")


def integral_overrides(argv: list[str]) -> list[str]:
    """An integer written as a float is that integer (`max_actor_steps=1e5` is 100000)."""

    def integral(value: str) -> str:
        if _FLOAT_LITERAL.fullmatch(value) and not value.lstrip("+-").isdigit() and float(value).is_integer():
            return str(int(float(value)))
        return value

    rewritten = []
    for arg in argv:
        key, separator, value = arg.partition("=")
        if separator and not key.startswith(("-", "hydra.")):
            arg = f"{key}={','.join(integral(item) for item in value.split(','))}"
        rewritten.append(arg)
    return rewritten


def run_overrides(run_directory: str, argv: list[str]) -> list[str]:
    """The overrides the run in `run_directory` was made with (its `.hydra/overrides.yaml`), but those whose
    key `argv` sets again: `resume=DIR` alone composes the run's own configuration, and what is typed beside
    it is then checked against that configuration as the same command's would be."""
    path = os.path.join(run_directory, ".hydra", "overrides.yaml")
    if not os.path.isfile(path):
        return []
    import yaml

    with open(path) as file:
        saved = [str(override) for override in yaml.safe_load(file) or []]
    given = {override_key(arg) for arg in argv}
    return [override for override in saved if override_key(override) not in given | {"resume"}]


def resume_arguments(argv: list[str]) -> list[str]:
    """The command line Hydra sees: `resume=DIR` runs in DIR with the run's own overrides, and a run
    directory that holds a run keeps its `.hydra/` config (`hydra.output_subdir=null`)."""
    from rl.checkpointing import holds_a_run

    if is_multirun(argv):
        return argv
    values = dict(arg.split("=", 1) for arg in argv if arg.startswith(("resume=", "hydra.run.dir=")))
    run_directory = values.get("hydra.run.dir")
    resume = values.get("resume")
    if resume not in (None, "", "null"):
        path = os.path.abspath(os.path.expanduser(resume))
        error = None if os.path.isdir(path) else f"no run directory at {path}"
        if error is None and run_directory is not None and os.path.abspath(os.path.expanduser(run_directory)) != path:
            error = f"names {path} but hydra.run.dir names {run_directory}"
        if error is not None:
            print(f"Invalid configuration: resume: {error}", file=sys.stderr)
            sys.exit(2)
        if run_directory is None:
            argv = [*argv, f"hydra.run.dir={path}"]
        argv = [*run_overrides(path, argv), *argv]
        run_directory = path
    if run_directory is not None:
        path = os.path.abspath(os.path.expanduser(run_directory))
        if os.path.isfile(os.path.join(path, ".hydra", "config.yaml")) and holds_a_run(path):
            argv = [*argv, "hydra.output_subdir=null"]
    return argv


def existing_run_directories(argv: list[str]) -> frozenset[str]:
    """The run (or sweep) directories the command line names that exist before Hydra makes its own: a refused
    command leaves them in place (rl.train.remove_empty_directories)."""
    named = [arg.split("=", 1)[1] for arg in argv if arg.startswith(("hydra.run.dir=", "hydra.sweep.dir="))]
    return frozenset(os.path.abspath(os.path.expanduser(path)) for path in named if os.path.isdir(path))


def run_directory_error(argv: list[str]) -> str | None:
    """Why the run (or sweep) directory this command would write cannot be written, as one line;
    None when it can or no job starts. Probed in its nearest existing ancestor, nothing left behind."""
    if any(arg in INFORMATION or arg.startswith("--cfg=") for arg in argv):
        return None
    multirun = is_multirun(argv)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = [arg.split("=", 1)[1] for arg in argv if arg.startswith(f"{key}=")]
    value = given[-1].strip("'\"") if given else ("multirun" if multirun else "outputs")
    if "${" in value:  # Resolved by Hydra: check the fixed part before the interpolation.
        value = os.path.dirname(value.split("${", 1)[0]) or "."
    path = os.path.abspath(os.path.expanduser(value))
    existing = path
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"Cannot write the run directory {path} ({key}): {existing} is not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write_check_", dir=existing))
    except OSError as error:
        return f"Cannot write the run directory {path} ({key}): {error.strerror or error} ({existing})"
    return None


def cluster_error(argv: list[str]) -> str | None:
    """A sweep sent to SLURM from a machine without it, as one line (submitit's own error is a traceback)."""
    launcher = [arg.split("=", 1)[1] for arg in argv if arg.startswith("hydra/launcher=")]
    if is_multirun(argv) and launcher and launcher[-1] in ("slurm", "submitit_slurm") and shutil.which("srun") is None:
        return (
            f"hydra/launcher={launcher[-1]}: SLURM's srun is not on this machine's PATH; submit from the cluster "
            "(hydra/launcher=submitit_local runs the same jobs here)"
        )
    return None


def _without_quotes(value: str) -> str:
    """`value` with each quoted part (and each character a backslash escapes) replaced by `x`: what is left
    is the grammar's own brackets and commas."""
    return re.sub(r"'[^']*'|\"[^\"]*\"|\\.", "x", value)


def unpaired(value: str) -> str | None:
    """Why the quotes or brackets of an override's value do not pair up; None when they do."""
    bare = _without_quotes(value)
    quote = next((mark for mark in ("'", '"') if mark in bare), None)
    if quote is not None:
        return f"the quote {quote} is never closed"
    opened: list[str] = []
    for character in bare:
        if character in BRACKETS:
            opened.append(character)
        elif character in BRACKETS.values():
            if not opened:
                return f"'{character}' closes nothing"
            last = opened.pop()
            if BRACKETS[last] != character:
                return f"'{character}' closes '{last}'"
    return f"'{opened[-1]}' is never closed" if opened else None


def has_empty_item(value: str) -> bool:
    """Whether a comma list in an override's value has an empty item (`1e-3,,2e-3`, `1,`, `choice(1,)`)."""
    return re.search(r"(^|[,(\[{])\s*,|,\s*($|[)\]}])", _without_quotes(value)) is not None


def grammar_reason(message: str) -> str:
    """Hydra's parser's message, less its list of the grammar's tokens, as a phrase."""
    prefix = "LexerNoViableAltException: "
    lines = [line for line in message.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("See https://", "Error parsing override"))]
    if not lines:
        return "not in the override grammar"
    if lines[0].startswith(prefix) and len(lines) > 1 and "^" in lines[1]:  # The override, and a caret under it.
        override = lines[0].removeprefix(prefix)
        at = lines[1].index("^") - len(prefix)
        return f"'{override[at]}' cannot stand there" if 0 <= at < len(override) else "not in the override grammar"
    reason = re.sub(r" expecting (\{[^}]*\}|\S+)", "", lines[0])
    reason = re.sub(r"^(extraneous|mismatched) input ", "unexpected ", reason)
    return reason.replace("no viable alternative at input", "cannot read").replace("'<EOF>'", "end")


def override_syntax_error(override: str, message: str) -> str:
    """One line for an override Hydra's parser refuses (`message`: its error), naming the key: a comma list
    with an empty item, a bracket or quote left open, or what the parser said, without its grammar dump."""
    key = override_key(override)
    if "=" not in override and not override.startswith("~"):
        return f"{key}: no value; an override is key=value"
    if re.search(r"\s", key):
        return f"{key!r}: a key holds no spaces; an override is key=value"
    value = override.split("=", 1)[1]
    reason = unpaired(value)
    if reason is None and has_empty_item(value):
        reason = "an empty item in a comma list"
    if reason is None:
        reason = grammar_reason(message)
    return f"{key}: cannot read {value!r}: {reason} (the override grammar: {GRAMMAR_PAGE})"


def as_typed(override: str, typed: list[str]) -> str:
    """The argument the user typed that became `override` (the rewrites above change some values)."""
    same_key = [arg for arg in typed if "=" in arg and override_key(arg) == override_key(override)]
    return same_key[-1] if same_key else override


def missing_option_error(error: Exception) -> str | None:
    """A group's option that conf/ lacks (a misspelt preset, say), naming the nearest one, as one line."""
    from hydra.errors import MissingConfigException

    from rl.experiments.validation import nearest_option

    cause = error.__cause__ or error.__context__
    missing = next((e for e in (error, cause) if isinstance(e, MissingConfigException) and e.options), None)
    if missing is None:
        return None
    group, _, name = str(missing.missing_cfg_file or "").rpartition("/")
    nearest = nearest_option(name, [str(option) for option in missing.options])
    options = f"did you mean {group}={nearest}?" if nearest else f"its options: {', '.join(missing.options)}"
    return f"{group}={name}: no such option of the config group {group}; {options}"


def preset_owner_error(key: str, argv: list[str]) -> str | None:
    """An agent option of another agent's preset (`experiment=dqn_cartpole agent=ppo`), as one line."""
    from omegaconf import OmegaConf

    choices = dict(arg.split("=", 1) for arg in argv if arg.startswith(("experiment=", "agent=")))
    experiment = choices.get("experiment")
    agent = choices.get("agent")
    preset = os.path.join(CONFIG_DIR, "experiment", f"{experiment}.yaml")
    if not (key.rpartition(".")[0] == "agent" and agent and os.path.isfile(preset)):
        return None
    defaults = OmegaConf.to_container(OmegaConf.load(preset)).get("defaults", [])
    owner = {k: v for e in defaults if isinstance(e, dict) for k, v in e.items()}.get("override /agent")
    if owner in (None, agent):
        return None
    return (
        f"agent: experiment={experiment} is a preset for agent={owner}: its agent settings ({key}, ...) "
        f"are {owner}'s, not {agent}'s; drop experiment= to run agent={agent} from its defaults"
    )


def composition_error(error: Exception, argv: list[str], typed: list[str]) -> str:
    """One line for a command line (`argv`, as rewritten from `typed`) Hydra cannot read or compose: an
    override it cannot parse names its key, an unknown key the nearest option."""
    from hydra.errors import OverrideParseException
    from omegaconf.errors import ConfigKeyError, ConfigTypeError, OmegaConfBaseException, ValidationError

    from rl.experiments.validation import OMEGACONF_CONTEXT, nearest_option, one_line, type_refusal

    def full_key(cause: BaseException | None) -> str:
        return str(cause.full_key or "") if isinstance(cause, OmegaConfBaseException) else ""

    if isinstance(error, OverrideParseException):
        return override_syntax_error(as_typed(error.override, typed), error.message)
    missing = missing_option_error(error)
    if missing is not None:
        return missing
    cause = error.__cause__ or error.__context__
    while cause is not None and not full_key(cause) and (cause.__cause__ or cause.__context__):
        cause = cause.__cause__ or cause.__context__  # A preset's error comes wrapped in Hydra's.
    key = full_key(cause)
    if key and (isinstance(cause, (ConfigKeyError, AttributeError)) or "not in struct" in str(cause)):
        name = key.rpartition(".")[2]
        options = [str(option) for option in cause.parent_node or {} if option != "hydra"]
        nearest = nearest_option(name, [option for option in options if not option.startswith("_")])
        unknown = f"{key}: unknown option" + (f"; did you mean {key.removesuffix(name)}{nearest}?" if nearest else "")
        return preset_owner_error(key, argv) or unknown
    if key:  # OmegaConf's check of an override: its type against a schema's field (an agent's, say), one line.
        typed_check = isinstance(cause, (ValidationError, ConfigTypeError))
        return f"{key}: {type_refusal(cause) if typed_check else one_line(str(cause.msg))}"
    text = f"{error}\n{cause or ''}".split("Config search path:")[0]  # Hydra's search path: not the user's error.
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = next((line.partition(":")[2].strip() for line in lines if line.startswith("full_key:")), "")
    lines = [line for line in lines if not line.startswith(OMEGACONF_CONTEXT)]
    said = " ".join(line + ("" if line.endswith(":") or i + 1 == len(lines) else ";") for i, line in enumerate(lines))
    return f"{named}: {said}" if named else said  # The key OmegaConf's context line named leads the line.

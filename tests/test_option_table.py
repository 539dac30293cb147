"""The option table (``derivations.option_table``) is the one home of every option: ``Options`` has one
field per entry, and the command line, notes markers, echoed inputs, rebuilt command lines, symbol
bindings and cache key all agree with it.

Each entry's ``example`` (command-line words that set it) runs through the CLI (argparse ->
``options_from_args``) and through a notes marker (``marker_fields`` -> ``Options``); both must give the
same ``Options``, in which the option is not at its default (so no example is vacuous).
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import fields, replace

import pytest

from memderive.arguments import option_argv, options_from_args
from memderive.commands.cli import build_parser, main
from memderive.derivations.claims.markers import KEYS, find_claims, marker_fields
from memderive.derivations.estimate import VALUE_FIELDS, estimate
from memderive.derivations.option_table import OPTIONS, OPTIONS_BY_NAME, options_for, symbol_values
from memderive.derivations.options import Options
from memderive.documents.text import inputs_text
from memderive.documents.writeup import cli_command

DEFAULT_MODEL = "llama-2-7b"
_PARSER = build_parser()


def _parsed(words: list[str], command: str = "estimate") -> argparse.Namespace:
    if "--model" not in words:
        words = ["--model", DEFAULT_MODEL, *words]
    return _PARSER.parse_args([command, *words])


def _model(words: tuple[str, ...]) -> str:
    return words[words.index("--model") + 1] if "--model" in words else DEFAULT_MODEL


def _marker(words: tuple[str, ...]) -> tuple[str, str]:
    """The mode and the marker body that say what ``words`` say on the command line."""
    by_flag = {o.flag: o for o in OPTIONS}
    mode, body, i = "params", [], 0
    while i < len(words):
        option = by_flag.get(words[i])
        if words[i] == "--model":
            i += 2
        elif option is not None and option.name == "mode":
            mode, i = words[i + 1], i + 2
        elif option is not None and option.kind == "bool":
            body.append(words[i][2:])  # --flash -> flash, --no-dropout -> no-dropout
            i += 1
        else:
            assert option is not None, words[i]
            body.append(f"{option.key}={shlex.quote(words[i + 1])}")
            i += 2
    return mode, " ".join(body)


def test_options_fields_are_the_table() -> None:
    """Every ``Options`` field has exactly one entry, with the same default; no entry names no field."""
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names))
    assert len({o.flag for o in OPTIONS}) == len(OPTIONS)
    assert sorted(names) == sorted(f.name for f in fields(Options))
    for f in fields(Options):
        assert OPTIONS_BY_NAME[f.name].default == f.default, f.name


@pytest.mark.parametrize("option", options_for("estimate"), ids=lambda o: o.name)
def test_example_sets_the_option(option) -> None:
    opts = options_from_args(_parsed(list(option.example)))
    assert getattr(opts, option.name) != option.default, f"{option.flag}'s example leaves it at its default"


@pytest.mark.parametrize("option", [o for o in options_for("estimate") if o.name != "mode"], ids=lambda o: o.name)
def test_marker_key_round_trips(option) -> None:
    """Every ``estimate`` option but ``--mode`` (a claim's quantity decides it) is a marker key, and a
    marker gives the value the command line gives."""
    assert option.key in KEYS
    from_cli = options_from_args(_parsed(list(option.example)))
    mode, body = _marker(option.example)
    from_marker = Options.from_keywords({"mode": mode, **marker_fields(body)})  # presets applied as check does
    assert from_marker == from_cli


#: The flags of ``estimate`` that are not options of an estimate: what to print and where (never a marker key).
OUTPUT_FLAGS = {"-h", "--help", "--json", "--format", "--convention", "--summary", "--decimals", "--detail",
                "--units", "-o", "--output", "--force"}


def test_every_estimate_flag_is_a_table_option_and_a_marker_key() -> None:
    """Enumerated from the parser itself: each flag of ``estimate`` is ``--model``, an output flag above, or
    an entry of the table whose key a notes marker takes (``--mode`` aside: a claim's quantity decides it);
    a switch's either spelling (``--sp``, ``--no-sp``) is a bare marker word setting the same field. A flag
    added to ``estimate`` by hand, outside the table, fails here."""
    parser = _PARSER._subparsers._group_actions[0].choices["estimate"]
    by_dest = {o.dest: o for o in options_for("estimate")}
    seen = set()
    for action in parser._actions:
        for flag in action.option_strings:
            if flag in OUTPUT_FLAGS or flag == "--model":
                assert flag != "--model" or "model" in KEYS
                continue
            option = by_dest.get(action.dest)
            assert option is not None, f"{flag} is a flag of estimate but not an entry of derivations/option_table.py"
            seen.add(option.name)
            if action.nargs == 0:  # a switch, either spelling
                assert set(marker_fields(flag[2:])) == {option.name}, flag
            else:
                assert flag == option.flag and (option.key in KEYS or option.name == "mode"), flag
    assert seen == {o.name for o in options_for("estimate")}  # and every entry for estimate is a flag of it


@pytest.mark.parametrize("option", options_for("estimate"), ids=lambda o: o.name)
def test_rebuilt_command_line_parses_to_the_same_options(option) -> None:
    """``cli_command`` (writeups, notebooks) and ``option_argv`` (plan rows) give a command line that
    the CLI reads back to equal ``Options``; the echoed inputs hold every option."""
    opts = options_from_args(_parsed(list(option.example)))
    est = estimate(_model(option.example), opts)
    words = shlex.split(cli_command(est))
    assert words[:2] == ["memderive", "estimate"]
    assert options_from_args(_PARSER.parse_args(words[1:])) == opts
    values = {f.name: getattr(opts, f.name) for f in fields(Options)}
    assert options_from_args(_parsed(option_argv(values))) == opts
    inputs = est.inputs()
    assert {k: v for k, v in inputs.items() if k not in ("model", "attention", "weight_dtype", "kv_dtype")} == \
        {k: v for k, v in values.items() if k not in ("flash", "attention", "weight_dtype", "kv_dtype")}
    if option.echo != "never" and opts.mode in option.modes:
        assert f" {option.label} " in f" {inputs_text(est)}", (option.label, inputs_text(est))


def test_symbol_bindings_and_cache_key() -> None:
    """Each size symbol is bound to its option's value; the cache key leaves out exactly the shared ones."""
    opts = Options(mode="train", batch=3, seq=64, tp=2, pp=2, dp=4, micro_batches=5, virtual_stages=2,
                   lora_rank=8, lora_targets="q_proj")
    bound = {str(k): v for k, v in symbol_values(opts).items()}
    assert bound == {"b": 3, "s": 64, "t": 2, "p": 2, "d": 4, "m": 5, "v": 2, "r": 8, "ep": 1, "cp": 1}  # n, g: inference
    infer = {str(k): v for k, v in symbol_values(Options(mode="infer", batch=1, seq=8, new_tokens=7)).items()}
    assert infer["n"] == 7 and infer["g"] == 128
    assert VALUE_FIELDS == {o.name for o in OPTIONS if o.shared}
    est = estimate(DEFAULT_MODEL, opts)
    assert all(est.values[k] == v for k, v in symbol_values(opts).items())


NOTES = """
<!-- memderive: quantity=kv_cache.total model=llama-2-7b batch=1 seq=4096 attention=flash kv-block=16 overhead=2GiB gpu=h100-sxm efficiency=0.4 kv-dtype=fp8 -->
$2 \\cdot b s l h$

<!-- memderive: quantity=activations.per_layer model=llama-2-7b batch=1 seq=4096 implementation=hf lora-rank=8 lora-targets=q_proj lora-dropout=0.1 -->
$sbh(34 + 5as/h)$

<!-- memderive: quantity=model_states.total model=mixtral-8x7b dp=4 ep=2 capacity-factor=1.25 -->
$16\\Psi$
"""


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_check_file_reads_every_option_key(tmp_path, capsys) -> None:
    """Keys that ``check --file`` refused as unknown before the table (attention, ep, kv-block,
    implementation, lora-dropout, capacity-factor, overhead, gpu) reach the claim, typed."""
    found = find_claims(NOTES)
    assert [x.error for x in found] == ["", "", ""]
    assert found[0].claim.options == {"batch": 1, "seq": 4096, "attention": "flash", "kv_block": 16,
                                      "overhead_bytes": 2 * 2**30, "gpu": "h100-sxm", "efficiency": 0.4,
                                      "kv_dtype": "fp8"}
    assert found[1].claim.options["implementation"] == "hf" and found[1].claim.options["lora_dropout"] == 0.1
    assert found[2].claim.options == {"dp": 4, "ep": 2, "capacity_factor": "1.25"}
    path = tmp_path / "notes.md"
    path.write_text(NOTES)
    code = main(["check", "--file", str(path)])
    out = capsys.readouterr()
    assert code in (0, 1) and "unknown key" not in out.out + out.err, out.err


def test_plan_takes_the_table_options() -> None:
    """``plan`` reads dtypes, LoRA and ep from the table and passes them to the layouts it estimates."""
    actions = {a.dest for a in _PARSER._subparsers._group_actions[0].choices["plan"]._actions}
    for name in ("weight_dtype", "kv_dtype", "lora_rank", "lora_targets", "ep", "dtype", "gpu", "overhead"):
        assert name in actions, name
    args = _parsed(["--gpu-memory", "80GB", "--seq", "512", "--global-batch", "8", "--lora-rank", "8",
                    "--lora-targets", "q_proj"], "plan")
    base = options_from_args(args, "train", batch=1)
    assert replace(base, lora_rank=None, lora_targets=()) == Options(mode="train", batch=1, seq=512)

"""Regression tests of issue 16 (what a fuzzer found): no wrong number, no hang, no traceback.

One test (or a few) per item of the issue; expected numbers come from transformers on the meta
device or from arithmetic in the comments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import transformers

from memderive.derivations.estimate import UnknownQuantity, estimate
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.models.config import ConfigError, from_config
from memderive.derivations.options import ArgumentError, Options
from tests.hf_meta import count_parameters, small_config


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*args: str, cwd: str | None = None, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, input=stdin, timeout=timeout)


def one_line_exit_2(result: subprocess.CompletedProcess, fragment: str = "") -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert fragment in lines[0]


# --- 2. JSON null is not "absent" -------------------------------------------------------------

@pytest.mark.parametrize("field", ["multi_query", "parallel_attn", "bias", "alibi", "new_decoder_architecture"])
def test_null_switch_is_refused_naming_it(field: str) -> None:
    """FalconConfig keeps None, which its modeling code reads as false (multi_query null: 8.2B, not 6.9B)."""
    config = {**small_config("falcon").to_dict(), field: None}
    with pytest.raises(ConfigError, match=f"'{field}' = None is not supported: null is not"):
        from_config(config)


@pytest.mark.parametrize(("model_type", "field"), [("gpt2", "n_inner"), ("llama", "num_key_value_heads"),
                                                   ("llama", "head_dim"), ("qwen2", "sliding_window"),
                                                   ("mistral", "sliding_window"), ("falcon", "ffn_hidden_size")])
def test_null_where_transformers_reads_it_as_derived(model_type: str, field: str) -> None:
    """Where the config class's own default is None (derived) a null is read as transformers reads it."""
    config = {**small_config(model_type).to_dict(), field: None}
    hf = transformers.CONFIG_MAPPING[model_type].from_dict(config)
    assert estimate(from_config(config)).number("parameters") == count_parameters(hf)


def test_null_size_is_refused() -> None:
    with pytest.raises(ConfigError, match="'vocab_size' = None"):
        from_config({**small_config("llama").to_dict(), "vocab_size": None})


# --- 3. a name that is both a preset and a local path -------------------------------------------

SMALL_GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 128, "n_positions": 64}


@pytest.mark.parametrize("name", ["gpt2", "LLAMA-2-7B"])
def test_a_local_path_wins_over_a_bundled_name(tmp_path, monkeypatch, name: str) -> None:
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(SMALL_GPT2))
    monkeypatch.chdir(tmp_path)
    model = resolve_model(name)
    assert model.source == os.path.join(name, "config.json") and model.sizes["h"] == 64
    result = cli("estimate", "--model", name, "--json", cwd=str(tmp_path))
    # by hand: wte 128*64 + wpe 64*64 = 12,288; per layer 12*64^2 + 13*64 = 49,984; two 99,968; ln_f 128
    assert json.loads(result.stdout)["parameters"] == 12_288 + 99_968 + 128 == 112_384


def test_a_folder_without_config_shadowing_a_bundled_name_is_an_error(tmp_path, monkeypatch) -> None:
    (tmp_path / "gpt2").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ArgumentError, match="bundled model and also a folder"):
        resolve_model("gpt2")
    assert resolve_model("llama-2-7b").source == "bundled preset"


# --- 4. the Python API validates types and names at the call ------------------------------------

@pytest.mark.parametrize("kwargs", [dict(offload="false"), dict(flash="no"), dict(zero=True), dict(sp="yes"),
                                    dict(tp=None), dict(dtype=16), dict(batch=1.5), dict(no_such_option=1),
                                    dict(recompute=True)])
def test_api_refuses_wrong_types_and_names(kwargs: dict) -> None:
    import memderive.api

    base = dict(mode="train", batch=1, seq=8, dp=2)
    with pytest.raises(ArgumentError) as caught:
        estimate("gpt2", **{**base, **kwargs})
    name, message = next(iter(kwargs)), str(caught.value)
    assert len(message.splitlines()) == 1 and (name in message or name.replace("_", "-") in message)
    with pytest.raises(ArgumentError):  # at the call, not when displayed
        memderive.api.estimate("gpt2", **{**base, **kwargs})


@pytest.mark.parametrize("call", [lambda: estimate("gpt2", "train"), lambda: estimate(["gpt2"]),
                                  lambda: estimate(12), lambda: estimate("gpt2", Options(), mode="train"),
                                  lambda: estimate("x" * 10_000_000)])
def test_api_misuse_is_one_value_error(call) -> None:
    with pytest.raises(ArgumentError) as caught:
        call()
    assert len(str(caught.value)) < 300


def test_unknown_quantity_is_a_value_error_and_a_key_error() -> None:
    est = estimate("gpt2")
    for key in (["parameters"], "no_such"):
        with pytest.raises(UnknownQuantity) as caught:
            est.number(key)  # type: ignore[arg-type]
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, KeyError)


def test_check_refuses_unknown_options_for_every_quantity() -> None:
    from memderive.derivations.claims.check import check

    with pytest.raises(ArgumentError, match="unknown option 'zer0'"):
        check("params.total", "12lh^2", model="gpt2", zer0=1)


# --- 5. nested powers: the digits of intermediate results are bounded ----------------------------

@pytest.mark.parametrize("claim", ["(((2**64)**64)**64)", "((((((2**64)**64)**64)**64)**64)**64)h",
                                   "(2**64)**8", "(10**30 10**30 10**30 10**30)h"])
def test_huge_numbers_give_up_at_once(claim: str) -> None:
    from memderive.derivations.claims.parser import FormulaError, parse_formula
    from memderive.symbolic.dims_sympy import h

    with pytest.raises(FormulaError, match="gives up: .*more than 100 digits"):
        parse_formula(claim, {"h": h})


def test_ten_to_the_sixty_fourth_is_still_read() -> None:
    from memderive.derivations.claims.parser import parse_formula

    assert parse_formula("10**64", {}).expr == 10**64


# --- 6. absurd layer counts: a stated bound, and no path that walks the layers --------------------

def test_absurd_sizes_are_refused_with_the_bound() -> None:
    with pytest.raises(ConfigError, match=r"'num_hidden_layers' = 10{30} is not supported: sizes are bounded by "
                                          r"1,000,000,000,000"):
        from_config({**small_config("mistral").to_dict(), "num_hidden_layers": 10**30})


@pytest.mark.parametrize(("model_type", "fields", "sliding"), [
    ("gemma2", {}, 10**12 - 10**12 // 2),  # every second layer is global
    ("gemma3_text", {}, 10**12 - 10**12 // 6),  # five local : one global
    ("qwen2", {"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 28}, 10**12 - 28),  # layers from 28 on slide
    ("gpt_oss", {}, 10**12 // 2),  # even layers slide
    ("mistral", {}, 10**12),
])
def test_a_trillion_layers_are_counted_in_closed_form(model_type: str, fields: dict, sliding: int) -> None:
    import time

    config = {**small_config(model_type).to_dict(), **fields, "num_hidden_layers": 10**12}
    config.pop("layer_types", None)
    start = time.perf_counter()
    model = from_config(config)
    estimate(model, mode="infer", batch=1, seq=8).number("total_bytes")
    assert time.perf_counter() - start < 20  # seconds, on a loaded 2-core machine; it was a hang
    assert model.windowed_layers == sliding


def test_moe_dense_layers_in_closed_form() -> None:
    """qwen2_moe: layers off decoder_sparse_step or in mlp_only_layers keep a dense MLP."""
    from memderive.derivations.models.families_moe import _dense_count

    # by enumeration for small cases: i < 10, step 3: (i+1) % 3 != 0 for 7 of them; plus 2 and 5 from only
    assert _dense_count(10, 3, {2, 5, 4, 99}) == sum(1 for i in range(10) if i in {2, 5, 4, 99} or (i + 1) % 3)
    assert _dense_count(10**12, 1, set()) == 0


# --- 7. check --file: linear scanning and an input limit --------------------------------------

@pytest.mark.parametrize("text", ["<!-- memderive: quantity=params.total " * 8000,
                                  "<!-- memderive: quantity=params.total -->\n" + "\\[ x " * 60000,
                                  "<!-- memderive: quantity=params.total -->\n" * 7000])
def test_markers_are_scanned_in_linear_time(text: str) -> None:
    import time

    from memderive.derivations.claims.markers import find_claims

    start = time.perf_counter()
    find_claims(text)
    assert time.perf_counter() - start < 5  # 25 s and 220 s before, for these 300 KB


def test_check_file_refuses_an_endless_input() -> None:
    result = cli("check", "--file", "/dev/zero", timeout=60)
    one_line_exit_2(result, "more than 4,000,000 bytes")


def test_check_file_refuses_non_utf8(tmp_path) -> None:
    path = tmp_path / "notes.md"
    path.write_bytes(b"\xff\xfe<!-- memderive: quantity=params.total -->")
    one_line_exit_2(cli("check", "--file", str(path)), "not UTF-8 text")


# --- 8. a valid but huge claim: the checker gives up at once -------------------------------------

def test_a_claim_of_hundreds_of_terms_gives_up() -> None:
    from memderive.derivations.claims.check import check
    from memderive.derivations.claims.parser import FormulaError

    # 9 symbols to the 4th power (d is the hidden size h in a parameter count since issue 23, so h and d
    # are one symbol): C(12, 4) = 495 terms; it took 19 s before
    with pytest.raises(FormulaError, match="gives up: the claim expands to 495 terms"):
        check("params.total", "(h+l+a+V+s+b+t+d+p+f)**4", model="gpt2")


# --- 9. Unicode superscripts, and one bad formula in a file -------------------------------------

@pytest.mark.parametrize(("text", "expected"), [("lh⁴", "h**4*l"), ("lh²", "h**2*l"), ("h³", "h**3"),
                                                ("2⁸h", "256*h"), ("h⁻¹", "1/h"), ("h¹", "h"), ("h⁰", "1")])
def test_unicode_superscripts(text: str, expected: str) -> None:
    from memderive.derivations.claims.parser import parse_formula
    from memderive.symbolic.dims_sympy import h, l

    assert str(parse_formula(text, {"h": h, "l": l}).expr) == expected


@pytest.mark.parametrize("text", ["¹", "h¹²", "h^²", "１２h"])
def test_bad_superscripts_and_other_digits_are_one_line(text: str) -> None:
    from memderive.derivations.claims.parser import FormulaError, parse_formula
    from memderive.symbolic.dims_sympy import h

    with pytest.raises(FormulaError) as caught:
        parse_formula(text, {"h": h})
    assert len(str(caught.value).splitlines()) == 1


NOTES = """<!-- memderive: quantity=params.total model=gpt2 -->
$P = lh⁴$

<!-- memderive: quantity=params.total model=gpt2 -->
$P = 12lh^2$

<!-- memderive: quantity=params.total model=gpt2 -->
$P = ¹$
"""


@pytest.mark.parametrize("fmt", [(), ("--json",), ("--format", "md")])
def test_one_bad_formula_never_aborts_the_file_report(tmp_path, fmt: tuple) -> None:
    path = tmp_path / "notes.md"
    path.write_text(NOTES)
    result = cli("check", "--file", str(path), *fmt)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    if fmt == ("--json",):
        reports = json.loads(result.stdout)
        assert [("error" in r, r.get("verdict")) for r in reports] == [(False, "different"),
                                                                      (False, "leading-order"), (True, None)]
    else:
        assert result.stdout.count("leading-order") == 1 and "error" in result.stdout


# --- 16. check --format md escapes what it quotes ----------------------------------------------

def test_markdown_report_shows_html_as_text(tmp_path) -> None:
    from memderive.documents.check_report import md_code, md_text

    folder = tmp_path / "x`<img src=x onerror=alert(1)>`"  # the model's name is its folder's
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(SMALL_GPT2))
    result = cli("check", "--quantity", "params.total", "--claim", "12lh^2", "--model", str(folder), "--format", "md")
    assert result.returncode == 1
    assert "for `` x`<img src=x onerror=alert(1)>` ``." in result.stdout  # a code span the name cannot close
    assert md_code("a``b|c") == "``` a``b|c ```" and md_text("<b> & </b>") == "&lt;b&gt; &amp; &lt;/b&gt;"
    path = tmp_path / "notes--> <b>.md"
    path.write_text("<!-- memderive: quantity=params.total -->\n$<script>x</script>$\n")
    out = cli("check", "--file", str(path), "--format", "md").stdout
    assert "<script>" not in out and "&lt;script&gt;" in out and "--> <b>" not in out


# --- 10. deeply nested JSON ---------------------------------------------------------------------

@pytest.mark.parametrize("command", [("estimate",), ("derive", "params"),
                                     ("check", "--quantity", "params.total", "--claim", "12lh^2")])
def test_deeply_nested_json_is_one_line(tmp_path, command: tuple) -> None:
    path = tmp_path / "config.json"
    path.write_text("[" * 100_000)
    one_line_exit_2(cli(*command, "--model", str(path)), "nested too deeply")


def test_deeply_nested_values_are_shown_briefly() -> None:
    from memderive.symbolic.errors import shown

    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert shown(deep) == "<list nested too deeply to show>"


# --- 11. fit and the model's positions ------------------------------------------------------------

@pytest.mark.parametrize("positions", [1.5, -1, 0, "2048", True, 10**13])
def test_positions_must_be_a_positive_integer(tmp_path, positions: object) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**SMALL_GPT2, "model_type": "gptj", "n_positions": positions}))
    one_line_exit_2(cli("fit", "--model", str(path), "--gpu-memory", "80GB", "--seq", "8"), "positions")


# --- 12. plots of huge values ---------------------------------------------------------------------

def test_plots_refuse_values_a_float_cannot_hold() -> None:
    from dataclasses import replace

    from memderive.figures.plots import draw, plot_data
    from memderive.symbolic.errors import DerivationError

    data = plot_data(estimate("gpt2", mode="train", batch=1, seq=8), "breakdown")
    with pytest.raises(DerivationError, match="cannot be drawn"):
        draw(replace(data, capacity=10**400))


def test_plot_of_the_largest_allowed_sizes_draws(tmp_path) -> None:
    path = tmp_path / "huge.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 10**12, "num_attention_heads": 10**6,
                                "num_hidden_layers": 10**12, "intermediate_size": 10**12, "vocab_size": 10**12}))
    result = cli("plot", "--model", str(path), "--batch", "1000000000000", "--seq", "1000000000000",
                 "--gpu-memory", "9" * 30 + "TB", "-o", str(tmp_path / "p.png"))
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize(("args", "fragment"), [(("--batch", "10000000000000000"), "past the bound"),
                                                (("--overhead", "9" * 29 + "TB"), "past the bound of 10^30")])
def test_options_are_bounded(args: tuple, fragment: str) -> None:
    one_line_exit_2(cli("estimate", "--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "8", *args),
                    fragment)


# --- 13. notebooks: values in generated code are Python literals ----------------------------------

def test_notebook_cells_parse_whatever_the_gpu_memory_text() -> None:
    import ast

    from memderive.notebooks.bundled import notebook

    nb = notebook(estimate("gpt2", mode="train", batch=1, seq=8), '80GB\n"); import os; ("')
    for cell in nb.cells:
        if cell.cell_type == "code":
            ast.parse(cell.source)
    assert any('gpu_memory="80GB\\n\\"); import os; (\\""' in cell.source for cell in nb.cells)


def test_notebook_refuses_a_size_with_a_newline(tmp_path) -> None:
    result = cli("notebook", "--model", "gpt2", "--batch", "1", "--seq", "8", "--gpu-memory", "80GB\n",
                 "-o", str(tmp_path / "n.ipynb"))
    one_line_exit_2(result, "cannot read --gpu-memory '80GB\\n'")


# --- 15. -o - is standard output; a dangling symlink exists ---------------------------------------

def test_dash_output_is_stdout(tmp_path) -> None:
    result = cli("estimate", "--model", "gpt2", "--json", "-o", "-", cwd=str(tmp_path))
    assert json.loads(result.stdout)["parameters"] == 124_439_808 and not (tmp_path / "-").exists()


def test_a_dangling_symlink_is_not_written_through(tmp_path) -> None:
    target, link = tmp_path / "target.ipynb", tmp_path / "link.ipynb"
    link.symlink_to(target)
    result = cli("notebook", "--model", "gpt2", "--batch", "1", "--seq", "8", "-o", str(link))
    one_line_exit_2(result, "exists")
    assert not target.exists()


# --- 17. numbers on the command line: ASCII digits; errors never echo a huge value ----------------

@pytest.mark.parametrize("value", ["０１", "1_000", "٣", "9" * 31, " 8", "8\n"])
def test_cli_numbers_are_ascii_digits(value: str) -> None:
    one_line_exit_2(cli("estimate", "--model", "gpt2", "--mode", "train", "--batch", value, "--seq", "8"),
                    "expected a whole number in ASCII digits")


@pytest.mark.parametrize("args", [("--model", "x" * 10_000_000), ("--model", "gpt2", "--mode", "y" * 10_000_000),
                                  ("--model", "gpt2\nllama-2-7b")])
def test_errors_never_echo_a_huge_value(tmp_path, args: tuple) -> None:
    big = tmp_path / "args"
    big.write_text(json.dumps(["estimate", *args]))  # too long for a command line: read from a file
    code = "import json, sys; from memderive.commands.cli import main; sys.exit(main(json.load(open(sys.argv[1]))))"
    result = subprocess.run([sys.executable, "-c", code, str(big)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": ROOT})
    one_line_exit_2(result)
    assert len(result.stderr) < 1200

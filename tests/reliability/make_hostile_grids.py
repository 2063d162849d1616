"""Write the hostile grid corpus (one file per case). Each file's first line: `# expect: <substring of the error line>`."""
import os
import sys
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_grids")
HEAD = '[experiment]\nname = "hostile"\nfigure = "curves"\n'
BASE = '[base]\n"model.size" = "nano"\n"data.tokenizer" = "byte"\n"train.max_steps" = 4\n'
AXES = '[axes]\n"train.lr" = [0.001, 0.002]\n'
OK = HEAD + BASE + AXES

def base_with(line):
    return HEAD + BASE + line + "\n" + AXES

cases = {}
def add(name, expect, text, binary=False):
    assert name not in cases, name
    cases[name] = (expect, text, binary)

# --- TOML syntax
add("syntax_unclosed_table", "syntax error", '[experiment\nname = "x"\n')
add("syntax_unclosed_string", "syntax error", HEAD + '[base]\n"model.size" = "nano\n')
add("syntax_missing_value", "syntax error", HEAD + '[base]\n"model.size" =\n')
add("syntax_bare_words", "syntax error", "this is not toml at all\n")
add("syntax_json_instead", "syntax error", '{"experiment": {"name": "x"}}\n')
add("syntax_yaml_instead", "syntax error", "experiment:\n  name: x\nbase:\n  model.size: nano\n")
add("syntax_duplicate_key", "syntax error", HEAD + '[base]\n"model.size" = "nano"\n"model.size" = "micro"\n')
add("syntax_duplicate_table", "syntax error", OK + '[axes]\n"train.seed" = [1, 2]\n')
add("syntax_duplicate_dotted", "syntax error", HEAD + "[base]\nmodel.size = \"nano\"\nmodel.size = \"micro\"\n")
add("syntax_trailing_comma_inline", "syntax error", HEAD + BASE + '[axes]\n"train.lr" = [0.001, 0.002,,]\n')
add("syntax_nul_byte", "", HEAD + BASE + 'x = "a\x00b"\n')
add("syntax_invalid_utf8", "", (HEAD + BASE).encode() + b'\xff\xfe\xfa = 1\n', binary=True)
add("syntax_bom_and_garbage", "syntax error", "\ufeff[[[[\n")
add("syntax_bad_escape", "syntax error", HEAD + '[base]\n"model.size" = "na\\qno"\n')
# --- structure
add("unknown_top_key", "colour", OK + "colour = \"blue\"\n")
add("unknown_experiment_key", "experiment.owner", HEAD + 'owner = "me"\n' + BASE + AXES)
add("unknown_config_key", "model.sizee", HEAD + '[base]\n"model.sizee" = "nano"\n' + AXES)
add("unknown_section_key", "optimizer.lr", HEAD + BASE + '"optimizer.lr" = 0.1\n' + AXES)
add("unknown_axis_key", "train.learning_rate", HEAD + BASE + '[axes]\n"train.learning_rate" = [0.1]\n')
add("unknown_figure", "experiment.figure", '[experiment]\nname = "x"\nfigure = "pie_chart"\n' + BASE + AXES)
add("unknown_scale_section", "scale.huge", OK + '[scale.huge]\nseeds = [0]\n')
add("unknown_scale_key", "scale.tiny.colour", OK + '[scale.tiny]\ncolour = 1\n')
add("base_not_table", "base", HEAD + 'base = 3\n')
add("axes_not_table", "axes", HEAD + BASE + 'axes = ["train.lr"]\n')
add("experiment_not_table", "experiment", 'experiment = "x"\n' + BASE + AXES)
add("zip_not_array", "zip", OK + '[zip]\n"train.seed" = [1, 2]\n')
add("extra_not_array", "extra", OK + '[extra]\n"model.attention" = "cem"\n')
add("exclude_not_array", "exclude", OK + '[exclude]\n"train.lr" = 0.001\n')
add("exclude_empty_rule", "exclude[0]", OK + '[[exclude]]\n')
add("exclude_everything", "exclude", OK + '[[exclude]]\n"model.size" = "nano"\n')
add("extra_empty", "extra[0]", OK + '[[extra]]\n')
add("deeply_nested", "", HEAD + "[base]\n" + "model = " + "{a = " * 60 + "1" + "}" * 60 + "\n")
add("deeply_nested_tables", "", HEAD + "[" + ".".join(["model"] + ["x"] * 40) + "]\ny = 1\n")
add("nested_list_value", "model.size", HEAD + '[base]\n"model.size" = [["nano"]]\n')
add("table_as_value", "model.size", HEAD + '[base]\n"model.size" = {name = "nano"}\n')
# --- axes
add("empty_axis", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = []\n')
add("axis_not_list", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = 0.001\n')
add("axis_repeated_values", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = [0.001, 0.001]\n')
add("axis_mixed_types", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = [0.001, "fast"]\n')
add("axis_of_tables", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = [{v = 1}]\n')
add("zip_unequal_lengths", "zip[0]", OK + '[[zip]]\n"train.seed" = [1, 2]\n"train.warmup_frac" = [0.1]\n')
add("zip_empty", "zip[0]", OK + '[[zip]]\n')
add("varied_twice", "train.lr", OK + '[[zip]]\n"train.lr" = [0.1, 0.2]\n')
add("seeds_and_seed_axis", "train.seed", "seeds = [0]\n" + OK.replace('"train.lr"', '"train.seed"').replace("0.001, 0.002", "1, 2"))
add("grid_of_ten_million_runs", "more than the limit", HEAD + BASE + "[axes]\n" + "".join(
    f'"{k}" = [{", ".join(str(v) for v in vals)}]\n' for k, vals in [
        ("train.seed", list(range(100))), ("train.lr", [f"0.00{i}" for i in range(1, 10)] + ["0.01"]),
        ("train.warmup_frac", [f"0.{i}" for i in range(10)]), ("train.final_lr_frac", [f"0.{i}" for i in range(10)]),
        ("train.weight_decay", [f"0.{i}" for i in range(10)]), ("train.grad_clip", [f"{i}.5" for i in range(10)]),
    ]))
add("huge_product_with_seeds", "more than the limit", "seeds = [" + ", ".join(str(i) for i in range(1000)) + "]\n" + HEAD + BASE + '[axes]\n"train.lr" = [' + ", ".join(f"{i}e-4" for i in range(1, 1001)) + "]\n")
# --- seeds
add("seeds_negative", "seeds", "seeds = [-1]\n" + OK)
add("seeds_empty", "seeds", "seeds = []\n" + OK)
add("seeds_string", "seeds", 'seeds = "0,1"\n' + OK)
add("seeds_float", "seeds", "seeds = [0.5]\n" + OK)
add("seeds_bool", "seeds", "seeds = [true]\n" + OK)
add("seeds_repeated", "seeds", "seeds = [1, 1]\n" + OK)
# --- values: types
add("string_for_int", "train.max_steps", HEAD + '[base]\n"model.size" = "nano"\n"train.max_steps" = "four"\n' + AXES)
add("numeric_string_for_int", "train.max_steps", HEAD + '[base]\n"model.size" = "nano"\n"train.max_steps" = "4"\n' + AXES)
add("float_for_int", "train.max_steps", HEAD + '[base]\n"model.size" = "nano"\n"train.max_steps" = 4.5\n' + AXES)
add("bool_for_int", "train.max_steps", HEAD + '[base]\n"model.size" = "nano"\n"train.max_steps" = true\n' + AXES)
add("string_for_float", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = ["0.001x"]\n')
add("int_for_string", "model.size", HEAD + '[base]\n"model.size" = 5\n' + AXES)
add("date_for_number", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = [1979-05-27]\n')
add("datetime_value", "model.size", HEAD + '[base]\n"model.size" = 1979-05-27T07:32:00Z\n' + AXES)
add("bool_for_float", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = [true]\n')
add("experiment_name_number", "experiment.name", '[experiment]\nname = 42\n' + BASE + AXES)
add("experiment_name_empty", "experiment.name", '[experiment]\nname = "   "\n' + BASE + AXES)
add("experiment_name_too_long", "experiment.name", '[experiment]\nname = "' + "x" * 5000 + '"\n' + BASE + AXES)
add("description_not_string", "experiment.description", '[experiment]\nname = "x"\ndescription = 3\n' + BASE + AXES)
# --- values: ranges and special floats
add("nan_lr", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = [nan]\n')
add("inf_lr", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = [inf]\n')
add("neg_inf_base", "train.grad_clip", HEAD + BASE + '"train.grad_clip" = -inf\n' + AXES)
add("nan_in_base", "train.warmup_frac", HEAD + BASE + '"train.warmup_frac" = nan\n' + AXES)
add("negative_T", "model.attn_steps", HEAD + BASE + '"model.attention" = "cem"\n"model.attn_steps" = -1\n' + AXES)
add("zero_T", "model.mlp_steps", HEAD + BASE + '"model.mlp" = "cem"\n"model.mlp_steps" = 0\n' + AXES)
add("huge_T", "model.attn_steps", HEAD + BASE + '"model.attention" = "cem"\n"model.attn_steps" = 100000\n' + AXES)
add("negative_lr", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = [-0.001]\n')
add("zero_lr", "train.lr", HEAD + BASE + '[axes]\n"train.lr" = [0.0]\n')
add("huge_d_model", "model.d_model", HEAD + BASE + '"model.d_model" = 9223372036854775807\n' + AXES)
add("huge_max_steps", "train.max_steps", HEAD + '[base]\n"model.size" = "nano"\n"data.tokenizer" = "byte"\n"train.max_steps" = 9223372036854775807\n' + AXES)
add("huge_seed", "train.seed", HEAD + BASE + '[axes]\n"train.seed" = [9223372036854775807]\n')
add("negative_batch", "train.batch_seqs", HEAD + BASE + '"train.batch_seqs" = -8\n' + AXES)
add("batch_not_multiple", "train.batch_seqs", HEAD + BASE + '"train.batch_seqs" = 10\n"train.micro_batch_seqs" = 4\n' + AXES)
add("beta_out_of_range", "train.beta2", HEAD + BASE + '"train.beta2" = 1.5\n' + AXES)
add("heads_do_not_divide", "model.n_heads", HEAD + BASE + '"model.d_model" = 100\n"model.n_heads" = 3\n' + AXES)
add("unknown_attention", "model.attention", HEAD + BASE + '"model.attention" = "transformer-xl"\n' + AXES)
add("unknown_size", "model.size", HEAD + '[base]\n"model.size" = "gigantic"\n' + AXES)
add("unknown_tokenizer_in_axis", "data.tokenizer", HEAD + BASE + '[axes]\n"data.tokenizer" = ["byte", "sentencepiece"]\n')
add("unknown_task", "task", HEAD + BASE + 'task = "vision"\n' + AXES)
add("unknown_precision", "train.precision", HEAD + BASE + '"train.precision" = "fp8"\n' + AXES)
add("bad_combination", "model.kq_diagonal", HEAD + BASE + '"model.kq_diagonal" = "shared"\n' + AXES)
add("llama_with_T2", "model.attn_steps", HEAD + BASE + '"model.attn_steps" = 2\n' + AXES)
add("unknown_value_in_extra", "model.mlp", OK + '[[extra]]\n"model.mlp" = "mixture"\n')
add("unknown_value_in_scale", "model.size", OK + '[scale.tiny.base]\n"model.size" = "enormous"\n')
# --- paths and names
add("name_parent_traversal", "experiment.name", '[experiment]\nname = "../x"\n' + BASE + AXES)
add("name_absolute_path", "experiment.name", '[experiment]\nname = "/etc/x"\n' + BASE + AXES)
add("name_deep_traversal", "experiment.name", '[experiment]\nname = "a/../../../../tmp/pwned"\n' + BASE + AXES)
add("name_dotdot", "experiment.name", '[experiment]\nname = ".."\n' + BASE + AXES)
add("name_backslash", "experiment.name", '[experiment]\nname = "..\\\\x"\n' + BASE + AXES)
add("name_nul", "experiment.name", '[experiment]\nname = "a\\u0000b"\n' + BASE + AXES)
add("name_newline", "experiment.name", '[experiment]\nname = "two\\nlines"\n' + BASE + AXES)
add("name_rtl_override", "experiment.name", '[experiment]\nname = "fig\\u202Eftp.exe"\n' + BASE + AXES)
add("name_zero_width", "experiment.name", '[experiment]\nname = "fig\\u200B2a"\n' + BASE + AXES)
add("name_home_tilde", "experiment.name", '[experiment]\nname = "~/x"\n' + BASE + AXES)
add("cache_dir_traversal", "data.cache_dir", HEAD + BASE + '"data.cache_dir" = "../../x"\n' + AXES)
add("unicode_key", "model.sıze", HEAD + '[base]\n"model.sıze" = "nano"\n' + AXES)
add("unicode_value", "model.size", HEAD + '[base]\n"model.size" = "nаno"\n' + AXES)  # Cyrillic a
add("emoji_value", "model.attention", HEAD + BASE + '"model.attention" = "\U0001F525"\n' + AXES)
add("control_chars_value", "model.size", HEAD + '[base]\n"model.size" = "na\\u0007no"\n' + AXES)

os.makedirs(OUT, exist_ok=True)
for name, (expect, text, binary) in cases.items():
    data = text if binary else text.encode("utf-8")
    header = f"# expect: {expect}\n".encode()
    if name in ("syntax_json_instead", "syntax_bom_and_garbage"):
        header = b""  # the file must be exactly the hostile bytes
    with open(os.path.join(OUT, name + ".toml"), "wb") as f:
        f.write(header + data)
print(len(cases), "files")

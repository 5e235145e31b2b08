"""List SpeeChain's recipe files that hold a data_cfg, the runs they give and the files they read.

Run in the SpeeChain venv: python scan_recipes.py SPEECHAIN_SRC > recipes.json
A run is (recipe, mode): train (train + valid groups) and/or test (test group).
"""
import glob, json, os, sys

sys.path.insert(0, sys.argv[1])
from speechain.utilbox.yaml_util import load_yaml
from speechain.utilbox.import_util import parse_path_args


def data_cfg_of(path):
    """(data_cfg mapping, exp settings) as SpeeChain's runner reads them, or (None, None)."""
    cfg = load_yaml(open(path, encoding="utf-8"))
    if "data_cfg" in cfg:
        data_cfg = cfg["data_cfg"]
        if isinstance(data_cfg, str):
            data_cfg = load_yaml(open(parse_path_args(data_cfg), encoding="utf-8"))
        return data_cfg, {k: cfg[k] for k in ("seed", "ngpu", "same_proc_seed") if k in cfg}
    if any(g in cfg for g in ("train", "valid", "test")) and not isinstance(cfg.get("train"), bool):
        return cfg, {}
    return None, None


def leaves(node, name=()):
    """(name path, iterator conf) of every iterator under a group."""
    if isinstance(node, dict) and set(node) == {"type", "conf"}:
        yield name, node
    else:
        for key, value in node.items():
            yield from leaves(value, name + (key,))


def main():
    root = os.environ["SPEECHAIN_ROOT"]
    out = []
    for path in sorted(glob.glob(os.path.join(root, "recipes", "**", "*.yaml"), recursive=True)):
        data_cfg, exp = data_cfg_of(path)
        if data_cfg is None:
            continue
        modes = []
        if "train" in data_cfg and "valid" in data_cfg:
            modes.append("train")
        if "test" in data_cfg:
            modes.append("test")
        iters = {g: [["/".join(n), it] for n, it in leaves(data_cfg[g])] for g in ("train", "valid", "test")
                 if g in data_cfg}
        out.append({"recipe": os.path.relpath(path, root), "modes": modes, "exp": exp, "iterators": iters})
    json.dump(out, sys.stdout, indent=1, default=str)


if __name__ == "__main__":
    main()

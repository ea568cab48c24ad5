"""Parse exported ``vllm serve`` lines with vLLM's own server parser; print what each sets as JSON.

Run by ``.venv-vllm/bin/python`` (imports nothing of dnnplace): its input is the export's text, as a user would
paste it.  An unknown or malformed flag fails here as it would for a user.

Usage: vllm_flags.py < lines.json  (a list of exported command lines); prints a list of {flag: value} objects.
"""

from __future__ import annotations

import json
import shlex
import sys

FIELDS = ("tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend", "nnodes", "node_rank",
          "master_addr", "master_port", "headless", "max_model_len", "max_num_batched_tokens", "port",
          "disable_custom_all_reduce", "dtype", "enable_expert_parallel")


def main() -> None:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    out = []
    for line in json.load(sys.stdin):
        words = [w for w in shlex.split(line) if not ("=" in w and w.split("=", 1)[0].isupper())]
        assert words[:2] == ["vllm", "serve"], words[:2]
        ns = vars(make_arg_parser(FlexibleArgumentParser()).parse_args(words[2:]))
        row = {k: ns.get(k) for k in FIELDS}
        kv = ns.get("kv_transfer_config")
        row["kv_connector"] = getattr(kv, "kv_connector", None)
        row["kv_role"] = getattr(kv, "kv_role", None)
        out.append(row)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

"""Small options of real launch scripts (issue 18), through pretrain_gpt --dry-run:
  --trust-remote-code (MindSpeed-LLM, passed to transformers' AutoTokenizer): accepted with one
    note line saying that no remote code is ever executed; not in the arguments dump (Megatron's
    parser does not have it);
  --test-mode (Megatron: TransformerConfig.test_mode, whose only use, Attention.run_realtime_tests,
    returns at once without --qk-layernorm): accepted, "test_mode ... True" in the dump, no
    refusal;
  --check-weight-hash-across-dp-replicas-interval N: accepted (its behaviour:
    tests/parallel/test_weight_hash.py)."""
from cli_common import PRETRAIN, Checker, dump_line, run, split_stdout

BASE = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--mock-data",
        "--vocab-size", "4096", "--tokenizer-type", "NullTokenizer", "--seq-length", "16",
        "--max-position-embeddings", "16", "--micro-batch-size", "2", "--global-batch-size", "8",
        "--train-iters", "4", "--lr", "1e-3"]
STOP = "megatron.c: a real run would stop here"
NOTE = ("note: --trust-remote-code accepted: MindSpeed: lets transformers run a model "
        "repository's own Python code; megatron.c never executes remote code (its HF tokenizer "
        "reads only tokenizer.json/tokenizer_config.json)")


def dry(extra, world=1):
    rc, out, err = run([PRETRAIN, "--dry-run", *BASE, *extra], world_size=world)
    pre, dump, _ = split_stdout(out)
    return rc, out, err, pre, {n: v for n, v, _ in dump or []}


def main():
    c = Checker("small_options")
    rc, out, err, pre, dump = dry(["--trust-remote-code"])
    c.check(rc == 0 and STOP not in out, "--trust-remote-code accepted (rc %d)\n%s" % (rc, err))
    c.check([l for l in pre if l.startswith("note: ")] == [NOTE], "one note line: %s" % pre[:3])
    c.check("trust_remote_code" not in dump, "not in Megatron's arguments dump")

    rc, out, err, pre, dump = dry(["--test-mode"])
    c.check(rc == 0 and STOP not in out, "--test-mode accepted (rc %d)\n%s%s" % (rc, out[-500:],
                                                                                 err))
    c.check(dump.get("test_mode") == "True", "dump: test_mode True (%s)" % dump.get("test_mode"))

    rc, out, err, pre, dump = dry(["--check-weight-hash-across-dp-replicas-interval", "5",
                                   "--tensor-model-parallel-size", "2"], world=4)
    c.check(rc == 0 and STOP not in out, "--check-weight-hash-across-dp-replicas-interval "
            "accepted (rc %d)\n%s" % (rc, err))
    c.check(dump.get("check_weight_hash_across_dp_replicas_interval") == "5", "dump: interval 5")
    c.check(dump_line("test_mode", "False") in out, "test_mode False by default")
    return c.summary()


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/python3
"""Unit tests of scaleout_model.py on synthetic runs made from known terms (with noise).

/usr/bin/python3 -m unittest tests/bench/scaleout_model_test.py   (about a second)
"""
import copy
import json
import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scaleout_model as sm  # noqa: E402

DS_SMALL = {"name": "small", "files": 2560, "bytes": 2560 * 8192, "entries": 2625, "shards": 64}
DS_LARGE = {"name": "large", "files": 1000, "bytes": 1000 * 110_000, "entries": 1011, "shards": 32}


def part(**values):
    return {"values": values}


TRUE = {"cores": 2.0, "replicas": 1.0,
        "blob": part(b=22.5, c=60.0),
        "cpu": part(c0=0.08, c_file=2e-6, c_byte=1.5e-9, c_entry=1.2e-6, c_peer=3e-4),
        "fence": part(a0=3e-3, alpha=120e-6, beta=3e-9, phi=0.2),
        "spread_max": part(w0=0.02, s=0.15, h=2e-3), "spread_med": part(w0=0.01, s=0.06, h=1e-3),
        "j1": part(j0=2.0, j_node=0.08),
        "read_med": part(t0=0.2, p_file=12e-6, p_byte=0.5e-9, l_open=2e-3, l_load=4e-4, u_file=30e-6, u_byte=1.5e-9),
        "move": part(e0=0.04, e_peer=2e-3, q_file=80e-6, q_byte=3e-9, q_open=1e-3),
        "rx": part(r0=2e6, r_node=5e4, k_fence=1.05, k_data=1.08),
        "teardown": part(d0=2.0, d1=0.1)}
TRUE["read_max"] = part(**{k: 1.1 * v for k, v in TRUE["read_med"]["values"].items()})


def synthetic(true=TRUE, datasets=(DS_SMALL, DS_LARGE), nodes=(2, 4, 8, 16, 32, 64), runs=3, noise=0.03, seed=7):
    """Runs as tests/bench/scaleout.py writes them, from the model's own formulas with `true` terms.
    Agents' waits and read times are spread evenly around the run's value, so that the median over
    agents is spread_med / read_med and the maximum spread_max / read_max exactly, before noise."""
    rng = random.Random(seed)
    jit = lambda: 1 + rng.gauss(0, noise)
    out = {"version": "synthetic", "machine": {"cores": true["cores"]}, "dataset": datasets[0], "runs": []}
    for ds in datasets:
        for n in nodes:
            for kind, fence, width in (("read", "default", None), ("exchange", "tree", None), ("exchange", "tree", 2),
                                       ("exchange", "ring", None), ("exchange", "mixed", None)):
                label = sm._fence_label({"fence": fence, "tree_width": width})
                for k in range(runs):
                    cpu = [sm.cpu_ready(true, ds, n) * jit() for _ in range(n)]
                    m = dict(true)
                    waited = 0.1 + 0.3 * k  # the readers' race with the prefetch differs from run to run
                    t = sm.on_test_machine(m, n, ds, label, kind, waited)
                    v = true["fence"]["values"]
                    alg, w = sm.fence_shape(label)
                    ft = sm.fence_terms(alg, n, sm.blob_bytes(true, ds, n), v["alpha"], v["beta"], w)
                    fence_s = v["a0"] + max(v["alpha"] * ft["path_m"] + v["beta"] * ft["path_b"],
                                            (v["alpha"] * ft["tot_m"] + v["beta"] * ft["tot_b"] + v["phi"] * sum(cpu)) / 2)
                    fence_s *= jit()
                    wait = t["ex_max"] - t["fence"]
                    rows = sm._rx_rows(true, {"n": n, "ds": ds, "fence": label, "kind": kind,
                                              "agents": [{"rank": i} for i in range(n)]})
                    agents = []
                    for i in range(n):
                        u = i / (n - 1)
                        a = {"rank": i, "exchange_seconds": fence_s + wait * u, "cpu_ready": cpu[i],
                             "exchange_bytes": sm.blob_bytes(true, ds, n), "stage_in_seconds": 0.1,
                             "net_rx_bytes": sm._lin(true["rx"], rows[i]) * jit(), "threads": 20, "fds": 30,
                             "tcp_conns": 2 * n, "rss_kib": 50_000}
                        if kind == "read":
                            a.update(files_read=ds["files"], read_seconds=t["read_med"] * jit() * (0.9 + 0.2 * u),
                                     opens={"remote": waited * (n - 1) / n * ds["files"]},
                                     cpu_end=cpu[i] + t["cpu_move"] * (0.97 + 0.06 * u))
                        agents.append(a)
                    out["runs"].append({"n": n, "run": k, "kind": kind, "fence": fence, "tree_width": width, "dataset": ds,
                                        "j1_seconds": sm._lin(true["j1"], [1, n]) * jit() + sum(cpu) / 2,
                                        "teardown_seconds": t["teardown"] * jit(), "source_opens": ds["shards"] + 2,
                                        "agents": agents, "complete": True})
    return out


class FitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.results = synthetic()
        cls.model = sm.fit(cls.results)

    def assertClose(self, got, want, rel, what):
        self.assertLess(abs(got - want), rel * abs(want), f"{what}: fitted {got:.4g}, true {want:.4g}")

    def test_recovers_terms_the_runs_determine(self):
        m = self.model
        for key, names in (("blob", ("b", "c")), ("cpu", ("c0", "c_file", "c_byte", "c_entry", "c_peer")),
                           ("fence", ("alpha",)), ("j1", ("j0", "j_node")), ("teardown", ("d0", "d1")),
                           ("spread_max", ("s", "h")), ("move", ("e_peer", "q_file", "q_byte", "q_open")),
                           ("read_med", ("l_open", "l_load"))):
            for name in names:
                self.assertGreaterEqual(m[key]["resolution"][name], 0.5, f"{key}.{name} not set by the runs")
                self.assertClose(m[key]["values"][name], TRUE[key]["values"][name], 0.2, f"{key}.{name}")

    def test_a_tree_on_fewer_nodes_than_its_width_is_left_out(self):
        # Slurm builds no tree there: the fence is node-local and measures nothing.
        got = {(r["n"], r["fence"]) for r in sm.runs_of(self.results) if r["fence"].startswith("tree")}
        self.assertEqual({n for n, f in got if f == "tree"}, {64})
        self.assertEqual({n for n, f in got if f == "tree-w2"}, {2, 4, 8, 16, 32, 64})
        self.assertTrue(any(c["fence"] == "tree-w2" for c in self.model["check"]))

    def test_runs_on_another_tree_width_are_reported_apart(self):
        # The ring does not use the tree, but the cluster's launch does: its runs get their own label.
        self.assertEqual(sm._fence_label({"fence": "ring", "tree_width": 2}), "ring-w2")
        self.assertEqual(sm._fence_label({"fence": "ring", "tree_width": sm.TREE_WIDTH}), "ring")
        self.assertEqual(sm._fence_label({"fence": "mixed"}), "mixed")
        self.assertEqual(sm.fence_shape("ring-w2"), ("ring", 2))
        self.assertEqual(sm.fence_shape("tree-w2"), ("tree", 2))
        self.assertEqual(sm.fence_shape("default"), ("ring", sm.TREE_WIDTH))
        self.assertEqual(sm.fence_shape("tree"), ("tree", sm.TREE_WIDTH))

    def test_predicts_64_within_tolerance(self):
        chk = self.model["check"]
        self.assertGreaterEqual(len(chk), 9)
        for c in chk:
            self.assertLess(abs(c["error"]), 0.1, f'{c["quantity"]} ({c["fence"]}): {c["error"]:+.1%}')

    def test_one_dataset_predicts_64_and_flags_what_it_cannot_split(self):
        res = synthetic(datasets=(DS_SMALL,), seed=3)
        m = sm.fit(res)
        for c in m["check"]:
            self.assertLess(abs(c["error"]), 0.15, f'{c["quantity"]} ({c["fence"]}): {c["error"]:+.1%}')
        r = m["read_med"]["resolution"]
        self.assertLess(min(r["p_file"], r["p_byte"]), 0.5)  # one file size: per file and per byte are one term
        self.assertLess(min(m["cpu"]["resolution"]["c_file"], m["cpu"]["resolution"]["c_byte"]), 0.5)

    def test_missing_fields_and_empty_runs(self):
        res = copy.deepcopy(synthetic(datasets=(DS_SMALL,), nodes=(2, 4, 64), runs=1))
        for r in res["runs"]:
            r.pop("teardown_seconds")
            for a in r["agents"]:
                a.pop("net_rx_bytes")
        res["runs"].append({"n": 8, "agents": [{"rank": 0}]})
        m = sm.fit(res)
        self.assertEqual(m["teardown"]["rows"], 0)
        self.assertIn("N-model", sm.markdown(res, m))
        self.assertIn("No runs", sm.markdown({"runs": []}, sm.fit({"runs": []})))


class FenceTest(unittest.TestCase):
    def test_reverse_tree(self):
        self.assertEqual(sm.tree_children(51)[0], list(range(1, 51)))  # flat up to TreeWidth + 1
        kids = sm.tree_children(64)
        self.assertEqual(kids[0], [1, 52])
        self.assertEqual(len(kids[1]), 50)
        self.assertEqual(len(kids[52]), 11)
        kids = sm.tree_children(4096)
        self.assertEqual(sum(len(k) for k in kids), 4095)
        self.assertEqual(kids[0], [1, 2552])

    def test_bytes_and_paths(self):
        blob = 1e6
        ring = sm.fence_terms("ring", 32, blob)
        self.assertAlmostEqual(ring["rx"][5], 31 / 32 * blob)
        tree = sm.fence_terms("tree", 32, blob)
        self.assertAlmostEqual(tree["rx"][5], blob)  # a leaf gets the whole blob
        self.assertGreaterEqual(tree["path_b"], 31 * blob)  # the root sends it to each of its 31 children
        self.assertLess(ring["path_b"], 2 * blob)
        big = sm.fence_terms("tree", 4096, blob)
        self.assertGreaterEqual(big["path_b"], (2 + 50 + 50) * blob)


    def test_messages_after_the_last_arrival(self):
        # Ring: the last contribution goes round, one neighbour at a time.
        self.assertEqual(sm.hops_after_last("ring", 64, "ex_med"), 31.5)
        self.assertEqual(sm.hops_after_last("ring", 64, "ex_max"), 63)
        # TreeWidth 50 at 64 nodes: two levels up, then the root's 2 children and the first one's
        # 50, one send after another: the last node has it after 1 + 50 sends.
        self.assertEqual(sm.hops_after_last("tree", 64, "ex_max"), 2 + 1 + 50)
        # A binary tree: at most two sends a level.
        self.assertLessEqual(sm.hops_after_last("tree-w2", 64, "ex_max"), 3 * 6)
        self.assertLess(sm.hops_after_last("tree-w2", 64, "ex_med"), sm.hops_after_last("ring", 64, "ex_med"))


class EfficiencyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = sm.fit(synthetic(datasets=(DS_SMALL,), nodes=(2, 4, 8, 16, 32), runs=2))

    def test_sanity(self):
        for ds in sm.IMAGENET.values():
            eff = sm.simulate_efficiency(self.model, sm.REF_NODE, ds)
            self.assertEqual([r["nodes"] for r in eff], [2 ** i for i in range(13)])
            for row in eff:
                for arm in ("fanstore", "direct_pfs", "tar_local"):
                    for k in ("epoch1", "steady", "run"):
                        self.assertTrue(0 < row[arm][k] <= 1, f'{arm} {k} at {row["nodes"]}: {row[arm][k]}')
                self.assertGreater(row["tar_local"]["steady"], 0.99)
            direct = [r["direct_pfs"]["steady"] for r in eff]
            self.assertEqual(direct, sorted(direct, reverse=True))  # never rises with N
            self.assertGreater(direct[0], 0.99)
            self.assertLess(direct[-1], 0.1 * direct[0])  # and falls once the metadata server saturates
            for row in eff[6:]:
                self.assertGreater(row["fanstore"]["steady"], row["direct_pfs"]["steady"])
            tar = [r["tar_local"]["staging"] for r in eff]
            self.assertEqual(tar, sorted(tar))

    def test_prediction_terms(self):
        p512, p4096 = sm.predict(self.model, sm.REF_NODE, sm.IMAGENET["imagenet-22k"])
        # ImageNet's indexes travel over the peer service: the fence carries a pointer per node,
        # and the gather costs less than the Gets of the whole blob from the PMIx server.
        self.assertTrue(p4096["over_peers"])
        self.assertLess(p4096["gets"], sm.GET_PROBE["byte_s"] * p4096["blob_bytes"])
        # Where the fence carries the blob (few files, in many shards): 312 MB sent 102 times along the tree.
        fenced = sm.predict(self.model, sm.REF_NODE, dict(sm.IMAGENET["imagenet-22k"], files=200_000,
                                                          shards=100_000), nodes=(4096,))[0]
        self.assertFalse(fenced["over_peers"])
        self.assertGreater(fenced["fence_tree"], fenced["fence_ring"])
        self.assertGreater(p4096["j1"], p4096["table"])
        self.assertLess(p4096["compute"], p512["compute"])


class CliTest(unittest.TestCase):
    def test_main_writes_markdown_and_json(self):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "r.json")
            with open(src, "w") as f:
                json.dump(synthetic(datasets=(DS_SMALL,), nodes=(2, 4, 8, 16, 32, 64), runs=1), f)
            sm.main([src, "--md", os.path.join(d, "out.md"), "--json", os.path.join(d, "out.json")])
            with open(os.path.join(d, "out.md")) as f:
                md = f.read()
            for s in ("### N-model: checked at N = 64", "### N-eff", "ImageNet-22k", "tree"):
                self.assertIn(s, md)
            with open(os.path.join(d, "out.json")) as f:
                self.assertIn("efficiency", json.load(f))


if __name__ == "__main__":
    unittest.main()

"""The table `distbench compare` prints: one row per matched point, A's and B's throughput, the ratio B/A with
its CI and Holm-corrected p-value, and the verdict.

Where every matched point trains a decoder language model (gpt2, llama), A's and B's throughput are shown in
tokens/s (samples/s x the sequence length), as `scale`'s table shows such points, in the columns samples/s
takes otherwise: the table keeps its width (it fills 120 characters already), and the ratio and its CI are the
same in either unit, since matched points share their sequence length. `--format json` gives both units."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from distbench.analysis import series_name, workload_label
from distbench.analysis.compare import VERDICT_STYLE, Comparison
from distbench.analysis.output import fmt_num, table
from distbench.analysis.records import tokens_per_s
from distbench.models.decoders import FAMILIES


def in_tokens(result: Comparison) -> bool:
    """Every matched point trains a decoder language model with a known sequence length."""
    configs = [p.a.get("config") or {} for p in result.points]
    return bool(configs) and all(c.get("model") in FAMILIES and c.get("seq_len") for c in configs)


def comparison_table(result: Comparison) -> Table:
    tokens = in_tokens(result)
    unit = "tokens/s" if tokens else "samples/s"
    columns = ["strategy", "N", "workload", f"A\n({unit})", f"B\n({unit})", "R\nA/B", "B/A", "95% CI", "p\n(Holm)"]
    columns.append("verdict")
    t = table(
        f"B = {result.sweep_b} vs A = {result.sweep_a} (threshold {result.threshold:.1%})",
        columns,
        right={"N", *columns[3:-1]},
    )
    workloads = [p.key[3:] for p in result.points]
    for p in result.points:
        verdict = f"[{VERDICT_STYLE.get(p.verdict, 'white')}]{p.verdict}[/]"
        if p.note:
            verdict += f" ({escape(p.note)})"
        t.add_row(
            escape(series_name(p.a)),
            str(p.key.world_size),
            escape(workload_label(p.key[3:], workloads)),
            *(
                (fmt_num(tokens_per_s(p.a), ",.0f"), fmt_num(tokens_per_s(p.b), ",.0f"))
                if tokens
                else (fmt_num(p.a.get("throughput"), ".2f"), fmt_num(p.b.get("throughput"), ".2f"))
            ),
            f"{p.repeats[0]}/{p.repeats[1]}" if p.ratio else "-",
            fmt_num(p.ratio, ".3f"),
            f"{p.ci[0]:.3f}-{p.ci[1]:.3f}" if p.ci else "-",
            f"{p.p_holm:.3g}" if p.p_holm is not None else "-",
            verdict,
        )
    return t

"""Graphs several test folders share (pytest puts this folder on `sys.path` through its conftest)."""

# more values live at once in its loop than a target of three vector registers holds: it spills
WIDE = """graph(x: f32[?], y: f32[?]) -> [z] {
  [a] = Exp(x)
  [b] = Sin(y)
  [c] = Cos(x)
  [d] = Tanh(y)
  [e] = Add(a, b)
  [f] = Mul(c, d)
  [z] = Sub(e, f)
}"""


def attention_block(batch: str, seq: str, heads: int, size: int, scale: float, fused_qkv: bool = False,
                    soft_cap: float | None = None, causal: bool = False, cap_op: str = "Tanh") -> str:
    """A BERT-style self-attention block as exporters write it: projections [batch, seq, heads·size] (or one
    fused [batch, seq, 3·heads·size] projection Split into them), the head split, Q·Kᵀ, the scale, an
    additive key mask `mask` [batch, 1, 1, seq], Softmax, ·V and the head merge, into y. `soft_cap`: the
    scores capped by cap·tanh(s / cap) before the mask (Gemma 2; `cap_op`: another op in place of Tanh);
    `causal`: then a Where hiding the keys past each row, from inputs `rows` [seq, 1] and `cols` [seq] holding
    the positions."""
    width = heads * size
    projections = (f"x: f32[{batch},{seq},{3 * width}]" if fused_qkv else
                   ", ".join(f"{n}: f32[{batch},{seq},{width}]" for n in "qkv"))
    positions = f", rows: f32[{seq},1], cols: f32[{seq}]" if causal else ""
    split = f"  [q, k, v] = Split(x, sizes) {{axis = -1}}\n" if fused_qkv else ""
    cap = (f"  const cap: f32[] = {soft_cap}\n  [sd] = Div(ss, cap)\n  [st] = {cap_op}(sd)\n  [sc] = Mul(st, cap)\n"
           if soft_cap is not None else "")
    hide = ("  const minus: f32[] = -1e30\n  [later] = Less(rows, cols)\n  [sw] = Where(later, minus, sm)\n"
            if causal else "")
    return f"""graph({projections}, mask: f32[{batch},1,1,{seq}]{positions}) -> [y] {{
  const sizes: i64[3] = [{width}, {width}, {width}]
  const split: i64[4] = [0, 0, {heads}, {size}]
  const merge: i64[3] = [0, 0, {width}]
  const scale: f32[] = {scale}
{split}  [qr] = Reshape(q, split)
  [qh] = Transpose(qr) {{perm = [0, 2, 1, 3]}}
  [kr] = Reshape(k, split)
  [kt] = Transpose(kr) {{perm = [0, 2, 3, 1]}}
  [vr] = Reshape(v, split)
  [vh] = Transpose(vr) {{perm = [0, 2, 1, 3]}}
  [s] = MatMul(qh, kt)
  [ss] = Mul(s, scale)
{cap}  [sm] = Add({"sc" if cap else "ss"}, mask)
{hide}  [p] = Softmax({"sw" if hide else "sm"}) {{axis = -1}}
  [o] = MatMul(p, vh)
  [ot] = Transpose(o) {{perm = [0, 2, 1, 3]}}
  [y] = Reshape(ot, merge)
}}"""


def head_split_block(keys_in_rows: bool) -> str:
    """Q and V given in the projections' memory [batch, rows, heads, size] with their head-split Transposes,
    the output merged back by a Transpose; K given the same way (`keys_in_rows`) or as Kᵀ [batch, heads, size,
    rows]."""
    k = "k: f32[2,9,3,16]" if keys_in_rows else "kt: f32[2,3,16,9]"
    split_k = "  [kt] = Transpose(k) {perm = [0, 2, 3, 1]}\n" if keys_in_rows else ""
    return f"""graph(q: f32[2,9,3,16], {k}, v: f32[2,9,3,24]) -> [o] {{
  [qh] = Transpose(q) {{perm = [0, 2, 1, 3]}}
{split_k}  [vh] = Transpose(v) {{perm = [0, 2, 1, 3]}}
  [s] = MatMul(qh, kt)
  [p] = Softmax(s) {{axis = -1}}
  [oh] = MatMul(p, vh)
  [o] = Transpose(oh) {{perm = [0, 2, 1, 3]}}
}}"""


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

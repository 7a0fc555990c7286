"""The compiled HLO text of a step, as the TPU compiler writes it (``compiled.as_text()`` or the
``*after_codegen.txt`` module of an XLA dump): its computations and instructions (``parse_hlo``), each
instruction's ``estimated_cycles`` and ``op_name`` metadata (``Instr``), and the schedule one step executes
(``schedule``): while bodies times their trip counts (read from the loop condition's compare against a constant),
of a conditional the costliest branch, each stated in a note. ``bench/cost_model.py`` sums and sorts what this
reads. Format: XLA's HLO text (openxla/xla ``hlo_instruction.cc`` ``ToString``)."""
from __future__ import annotations

import dataclasses
import math
import re


# ----------------------------------------------------------------------------------------------------
# Reading the HLO text


@dataclasses.dataclass
class Instr:
    name: str
    shape: str
    opcode: str
    rest: str
    """Everything after ``opcode(``: operands and attributes."""

    @property
    def cycles(self) -> int | None:
        m = re.search(r'"estimated_cycles":"(\d+)"', self.rest)
        return int(m.group(1)) if m else None

    @property
    def op_name(self) -> str:
        m = re.search(r'op_name="([^"]*)"', self.rest)
        return m.group(1) if m else ""

    def callees(self, attr: str) -> list[str]:
        m = re.search(rf"\b{attr}=(\{{[^}}]*\}}|%[\w.\-]+)", self.rest)
        return re.findall(r"%([\w.\-]+)", m.group(1)) if m else []

    def operands(self) -> list[str]:
        return re.findall(r"%([\w.\-]+)", self.rest[:_close(self.rest, 1)])


def _close(text: str, depth: int = 0) -> int:
    """Index of the parenthesis that brings ``depth`` (open before ``text``) back to 0; len(text) if none."""
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return i
    return len(text)


_COMP = re.compile(r"^(ENTRY\s+)?%([\w.\-]+)\s+\(.*\)\s+->\s+.*\{\s*$")
_HEAD = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([\w\-]+)\(")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
          "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "s4": 0.5, "u4": 0.5}


def _split_shape(text: str) -> tuple[str, str]:
    """'(a, b{..}) op(...)' or 'f32[2]{0} op(...)' -> (shape, remainder)."""
    if text.startswith("("):
        end = _close(text) + 1
        return text[:end], text[end:]
    cut = text.find(" ")
    return (text, "") if cut < 0 else (text[:cut], text[cut:])


def parse_hlo(text: str) -> tuple[dict[str, list[Instr]], str]:
    """HLO module text -> ({computation: instructions in order}, entry computation name). An instruction may span
    several lines (a Pallas kernel's ``frontend_attributes`` hold newlines): lines that start nothing new
    continue the instruction before them."""
    comps: dict[str, list[Instr]] = {}
    entry, current, last = "", None, None
    for line in text.splitlines():
        head = _COMP.match(line)
        if head:
            current, last = comps.setdefault(head.group(2), []), None
            entry = head.group(2) if head.group(1) else entry
            continue
        m = _HEAD.match(line)
        if m is None or current is None:
            if line.strip() == "}":
                current, last = None, None
            elif last is not None:
                last.rest += "\n" + line
            continue
        shape, rest = _split_shape(line[m.end():])
        op = _OPCODE.match(rest)
        last = Instr(m.group(1), shape, op.group(1), rest[op.end():]) if op else None
        if last is not None:
            current.append(last)
    return comps, entry


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape (a tuple: the sum of its elements); layouts and tiling padding ignored."""
    total = 0.0
    for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shape):
        total += _BYTES.get(dtype, 4) * math.prod(int(d) for d in dims.split(",") if d)
    return int(total)


# ----------------------------------------------------------------------------------------------------
# The executed schedule

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
               "ragged-all-to-all")
ASYNC_DONE = ("-done", "-update")


def trip_count(while_op: Instr, comps: dict[str, list[Instr]], scope: dict[str, Instr]) -> int | None:
    """A while loop's trip count: the compiler's ``known_trip_count``, else the condition ``i < N`` on a tuple
    element whose initial value is a constant (how ``lax.scan`` and ``fori_loop`` lower); None if neither."""
    known = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', while_op.rest)
    if known:
        return int(known.group(1))
    cond = comps.get((while_op.callees("condition") or [""])[0], [])
    local = {i.name: i for i in cond}
    root = cond[-1] if cond else None
    if root is None or root.opcode != "compare":
        return None
    direction = re.search(r"direction=(\w+)", root.rest)
    args = [local.get(n) for n in root.operands()]
    if len(args) != 2 or None in args or direction is None:
        return None
    if args[0].opcode == "constant":  # N > i
        args, flip = args[::-1], {"GT": "LT", "GE": "LE"}
        dir_ = flip.get(direction.group(1), "")
    else:
        dir_ = direction.group(1)
    gte, bound = args
    if gte.opcode != "get-tuple-element" or bound.opcode != "constant" or dir_ not in ("LT", "LE"):
        return None
    index = int(re.search(r"index=(\d+)", gte.rest).group(1))
    limit = int(re.match(r"\s*(-?\d+)", bound.rest).group(1))
    init = _tuple_element(while_op, index, scope)
    if init is None:
        return None
    return max(limit - init + (1 if dir_ == "LE" else 0), 0)


def _tuple_element(while_op: Instr, index: int, scope: dict[str, Instr]) -> int | None:
    ops = while_op.operands()
    tup = scope.get(ops[0]) if ops else None
    if tup is None or tup.opcode != "tuple":
        return None
    elems = tup.operands()
    node = scope.get(elems[index]) if index < len(elems) else None
    while node is not None and node.opcode in ("copy", "bitcast", "convert"):
        node = scope.get(node.operands()[0]) if node.operands() else None
    if node is None or node.opcode != "constant":
        return None
    m = re.match(r"\s*(-?\d+)", node.rest)
    return int(m.group(1)) if m else None


@dataclasses.dataclass
class Executed:
    """One scheduled instruction and how many times one step runs it."""

    instr: Instr
    computation: str
    times: float


def schedule(comps: dict[str, list[Instr]], entry: str) -> tuple[list[Executed], list[str]]:
    """Every instruction one step executes, with its count, and notes on how loops and branches were read."""
    notes: list[str] = []
    cost_memo: dict[str, float] = {}

    def own_cost(name: str) -> float:  # cycles of one run of a computation, for choosing a branch
        if name not in cost_memo:
            cost_memo[name] = 0.0
            cost_memo[name] = sum(e.times * (e.instr.cycles or 0) for e in walk(name, 1.0, quiet=True))
        return cost_memo[name]

    def walk(name: str, times: float, quiet: bool = False) -> list[Executed]:
        out: list[Executed] = []
        body = comps.get(name, [])
        scope = {i.name: i for i in body}
        for ins in body:
            out.append(Executed(ins, name, times))
            if ins.opcode == "while":
                n = trip_count(ins, comps, scope)
                if n is None:
                    n = 1
                    if not quiet:
                        notes.append(f"while loop {ins.name} ({ins.op_name or 'no op_name'}): trip count unknown, "
                                     "counted once")
                elif not quiet:
                    notes.append(f"while loop {ins.name} ({ins.op_name or 'no op_name'}): {n} trips")
                for c in ins.callees("body"):
                    out += walk(c, times * n, quiet)
                for c in ins.callees("condition"):
                    out += walk(c, times * (n + 1), quiet)
            elif ins.opcode == "conditional":
                branches = ins.callees("branch_computations") or (
                    ins.callees("true_computation") + ins.callees("false_computation"))
                if branches:
                    costs = [own_cost(b) for b in branches]
                    pick = branches[costs.index(max(costs))]
                    if not quiet:
                        notes.append(f"conditional {ins.name} ({ins.op_name or 'no op_name'}): the costliest of "
                                     f"{len(branches)} branches counted ({', '.join(f'{c:,.0f}' for c in costs)} "
                                     "cycles)")
                    out += walk(pick, times, quiet)
            elif ins.opcode in ("call", "async-start") or ins.opcode.endswith("-start"):
                for c in ins.callees("to_apply" if ins.opcode == "call" else "calls"):
                    out += walk(c, times, quiet)
        return out

    return walk(entry, 1.0), notes


# ----------------------------------------------------------------------------------------------------
# What each operation does

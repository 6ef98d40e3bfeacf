# tape_autograd.py — owns a small reverse-mode autograd written in plain Python (a tape of NamedTuple records
# holding backward closures, dict-based gradient accumulation, a global name counter), the user-object workload
# issue 12 asks cdynamo to compile as one graph under nopython, as torch._dynamo does.
from typing import Callable, List, NamedTuple

import torch

_counter = 0
tape = []  # Step records, in the order the forward ran


def new_name():
    global _counter
    _counter += 1
    return "t" + str(_counter)


def clear():
    global _counter
    tape.clear()
    _counter = 0


class Step(NamedTuple):
    ins: List[str]
    out: str
    backward: Callable  # d(loss)/d(out) -> [d(loss)/d(in) for each input]


class Node:
    def __init__(self, data, name=None):
        self.data = data
        self.name = name if name is not None else new_name()

    def __add__(self, other):
        return _record(Node(self.data + other.data), [self, other], lambda g: [g, g])

    def __mul__(self, other):
        if isinstance(other, (int, float)):
            return _record(Node(self.data * other), [self], lambda g: [g * other])
        a, b = self, other
        return _record(Node(a.data * b.data), [a, b], lambda g: [g * b, g * a])

    def __rmul__(self, other):
        return self * other

    def tanh(self):
        out = Node(torch.tanh(self.data))

        def back(g):
            return [g * Node(1 - out.data * out.data)]

        return _record(out, [self], back)

    def total(self):
        me = self
        return _record(Node(self.data.sum()), [self], lambda g: [Node(g.data.expand(me.data.shape))])


def _record(out, ins, backward):
    tape.append(Step(ins=[i.name for i in ins], out=out.name, backward=backward))
    return out


def gradients(loss, wrt):
    grads = {loss.name: Node(torch.ones_like(loss.data))}
    for step in reversed(tape):
        g = grads.get(step.out)
        if g is None:
            continue
        for name, part in zip(step.ins, step.backward(g)):
            if name in grads:
                grads[name] = Node(grads[name].data + part.data)
            else:
                grads[name] = part
    return [grads[w.name] if w.name in grads else None for w in wrt]


def loss_of(x, w):
    a, b = Node(x, "x"), Node(w, "w")
    return ((a * b).tanh() * 2.0 + a).total()


def forward_only(x, w):
    return loss_of(x, w).data


def forward_and_backward(x, w):
    clear()
    a, b = Node(x, "x"), Node(w, "w")
    loss = ((a * b).tanh() * 2.0 + a).total()
    ga, gb = gradients(loss, [a, b])
    return loss.data, ga.data, gb.data

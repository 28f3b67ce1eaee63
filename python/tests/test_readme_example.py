"""The README's "Check your Python model" example, verbatim, plus the failure it promises."""

import pytest
import torch

import graphcheck


class MyModel(torch.nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.proj = torch.nn.Linear(hidden, hidden, bias=False).requires_grad_(False)
        self.scale = torch.zeros(hidden)           # derived state, refreshed by PWAL
        self.hidden = hidden

    def load_weights(self, weights):
        return graphcheck.default_load_weights(self, weights)

    def process_weights_after_loading(self):
        graphcheck.hook(self, "finalize_scale")
        self.scale.copy_(self.proj.weight.abs().sum(0))   # in place: graphs keep reading it

    def forward(self, x):
        return self.proj(x) * self.scale

    def make_inputs(self, batch_size, seed):
        return torch.randn(batch_size, self.hidden, generator=torch.Generator().manual_seed(seed))


def test_weight_lifecycle():
    graphcheck.check(MyModel, scenario={"cycles": [{"refit": {"seed": 2}}, {"refit": {"seed": 3}}],
                                        "config": {"hidden": 16}}, raise_on_failure=True)


class Rebinding(MyModel):
    def process_weights_after_loading(self):
        graphcheck.hook(self, "finalize_scale")
        self.scale = self.proj.weight.abs().sum(0)


def test_the_rebind_the_readme_promises_is_caught():
    with pytest.raises(graphcheck.CheckFailed) as e:
        graphcheck.check(Rebinding, raise_on_failure=True)
    assert "[address]" in str(e.value) and "tensor 'scale' moved from 0x" in str(e.value), str(e.value)

import pytest

from ragen2.rollout.parsing import leading_think, parse_response


@pytest.mark.parametrize("text,think,answer", [
    ("<think>go down</think><answer>Down</answer>", "go down", "Down"),
    ("  <think>a\nb</think>\n<answer> Left </answer>  ", "a\nb", "Left"),
    ("<think></think><answer>Up</answer><|im_end|>", "", "Up"),
])
def test_parses_well_formed(text, think, answer):
    p = parse_response(text, eos_text="<|im_end|>")
    assert (p.think, p.answer, p.format_ok) == (think, answer, True)


@pytest.mark.parametrize("text", [
    "Down",
    "<answer>Down</answer>",                                   # no think
    "<think>x</think>",                                        # no answer
    "<think>x</think><answer></answer>",                       # empty answer
    "<think>x</think><answer>Down",                            # unclosed (cut at max tokens)
    "<think>x<think>y</think><answer>Down</answer>",           # nested tag
    "<think>x</think><answer>Down</answer> trailing words",
    "prefix <think>x</think><answer>Down</answer>",
    "<think>x</think><answer>a<answer>b</answer>",
])
def test_rejects_malformed(text):
    p = parse_response(text)
    assert not p.format_ok and p.answer is None and p.think is None


@pytest.mark.parametrize("text,think", [
    ("<think> I am at row 1 </think><answer>Left</answer>", "I am at row 1"),
    ("<think>plan</think> trailing junk", "plan"),          # unparsable, reasoning still read
    ("<think>plan</think><answer></answer>", "plan"),
    ("no think at all <think>x</think>", None),
    ("<think>unclosed", None),
    ("<think>a <think> b</think>", None),
])
def test_leading_think(text, think):
    assert leading_think(text) == think

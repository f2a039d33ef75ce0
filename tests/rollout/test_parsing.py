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


def test_think_token_span_char_level():
    from ragen2.rollout.parsing import think_token_span

    text = "<think>go right</think><answer>Right</answer>"
    span = think_token_span(lambda k: text[:k], len(text))
    assert span == (7, 7 + len("go right"))
    # the generation prompt already opened the block: the reasoning starts at token 0
    body = "go right</think><answer>Right</answer>"
    assert think_token_span(lambda k: body[:k], len(body), prefix="<think>\n") == (0, 8)
    for bad in ("<think>unclosed", "no tags", "<think></think><answer>x</answer>"):
        assert think_token_span(lambda k, b=bad: b[:k], len(bad)) is None


@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_think_token_span_on_real_tokenizers(request, which):
    """A byte-level BPE splits tags into pieces: the span still holds exactly the reasoning."""
    from ragen2.rollout.parsing import think_token_span

    tok = request.getfixturevalue("tiny_tokenizer" if which == "tiny" else "smollm2_tokenizer")
    text = "<think>The goal is two cells right.</think><answer>Right</answer>"
    ids = tok.encode(text, add_special_tokens=False)
    a, b = think_token_span(lambda k: tok.decode(ids[:k], skip_special_tokens=False), len(ids))
    assert tok.decode(ids[a:b], skip_special_tokens=False).strip() == "The goal is two cells right."


def test_parse_plain_takes_the_whole_reply():
    from ragen2.rollout.parsing import ParsedResponse, parse_plain

    assert parse_plain("  7 - 5 = 2\n<|im_end|>", "<|im_end|>") == ParsedResponse("7 - 5 = 2",
                                                                                   "7 - 5 = 2")
    assert not parse_plain(" \n<|im_end|>", "<|im_end|>").format_ok

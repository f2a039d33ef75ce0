"""Chat templates checked instead of assumed: five families as the hub ships them (written here
as jinja strings), accepted or refused by rule, then a 3-turn conversation rendered on token ids."""

from __future__ import annotations

import pytest

from ragen2.rollout.chat import ChatRenderer, ChatTemplateError
from ragen2.rollout.parsing import parse_response

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3 = ("<|begin_of_text|>{% for message in messages %}{{ '<|start_header_id|>' + "
          "message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
          "{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
# Mistral v0.3: the system message is prepended to the *last* user message
MISTRAL = ("{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
           "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}"
           "{%- endif %}<s>{%- for message in loop_messages %}{%- if message['role'] == 'user' %}"
           "{%- if loop.last and system_message is defined %}"
           "{{ '[INST] ' + system_message + '\n\n' + message['content'] + '[/INST]' }}"
           "{%- else %}{{ '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}"
           "{%- elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + '</s>' }}"
           "{%- endif %}{%- endfor %}")
GEMMA = ("<bos>{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
         "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') "
         "!= (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
         "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'assistant' %}"
         "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
         "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
         "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}")
# DeepSeek-R1 distills: the generation prompt opens the reasoning; past reasoning is dropped
R1 = ("<｜begin▁of▁sentence｜>{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}"
      "{% endif %}{% for message in messages %}{% if message['role'] == 'user' %}"
      "{{ '<｜User｜>' + message['content'] }}{% elif message['role'] == 'assistant' %}"
      "{% set content = message['content'] %}{% if '</think>' in content %}"
      "{% set content = content.split('</think>')[-1] %}{% endif %}"
      "{{ '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<｜Assistant｜><think>\n' }}{% endif %}")
# refused: only the last user message survives; turns are numbered
LAST_ONLY = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] + '\n' }}"
             "{% endif %}{% endfor %}User: {{ messages[-1]['content'] }}"
             "{% if add_generation_prompt %}\nAssistant: {% endif %}")
NUMBERED = ("{% for m in messages %}{% if m['role'] == 'user' %}Turn {{ loop.index }}: "
            "{% endif %}{{ m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}"
            "{% if add_generation_prompt %}assistant: {% endif %}")

# name, template, system_in_user, response_prefix, rendering exactly the template's own
ACCEPTED = [("chatml", CHATML, False, "", True), ("llama3", LLAMA3, False, "", True),
            ("mistral_v0.3", MISTRAL, True, "", False), ("gemma", GEMMA, True, "", True),
            ("deepseek_r1", R1, False, "<think>\n", False)]


@pytest.fixture(params=["tiny", "smollm2"])
def tokenizer(request, tiny_tokenizer):
    """The tiny model's tokenizer and SmolLM2's real BPE (49,152 pieces)."""
    if request.param == "tiny":
        return tiny_tokenizer
    return request.getfixturevalue("smollm2_tokenizer")


@pytest.fixture
def with_template(tokenizer, monkeypatch):
    def set_template(template: str):
        monkeypatch.setattr(tokenizer, "chat_template", template)
        return tokenizer
    return set_template


SYSTEM, OBS = "Reach the goal G.\nAnswer with a move.", ["Grid 1: P _ G", "Grid 2: _ P G",
                                                            "Grid 3: _ _ P"]
REPLIES = ["<think>G is right of me.</think><answer>Right</answer>",
           "<think>One more step.</think><answer>Right</answer>"]


def _conversation(renderer: ChatRenderer, tok) -> list[int]:
    """The ids the runner builds over 3 turns, the replies tokenised as a model samples them."""
    ids = renderer.initial_prompt(SYSTEM, OBS[0])
    for reply, obs in zip(REPLIES, OBS[1:]):
        body = reply.removeprefix(renderer.response_prefix.strip())  # R1: the prompt opened <think>
        ids += tok.encode(body, add_special_tokens=False)
        ids += renderer.observation_suffix(obs, generation_ended_with_eos=False)
    return ids


@pytest.mark.parametrize("name, template, in_user, prefix, exact", ACCEPTED,
                         ids=[a[0] for a in ACCEPTED])
def test_accepted_families_render_a_conversation_turn_by_turn(with_template, name, template,
                                                              in_user, prefix, exact):
    tok = with_template(template)
    r = ChatRenderer(tok)
    assert (r.system_in_user, r.response_prefix) == (in_user, prefix)
    text = tok.decode(_conversation(r, tok), skip_special_tokens=False)
    if exact:  # token ids decode to the template's own rendering of the whole conversation
        system = [] if in_user else [{"role": "system", "content": SYSTEM}]
        first = f"{SYSTEM}\n\n{OBS[0]}" if in_user else OBS[0]
        msgs = system + [{"role": "user", "content": first}]
        for reply, obs in zip(REPLIES, OBS[1:]):
            msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
        assert text == tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    # in every family: the instructions once, each observation once and in order, the reasoning
    # of each turn kept as sampled, the prompt ending where the next response starts
    assert text.count(SYSTEM) == 1
    at = [text.index(o) for o in OBS]
    assert at == sorted(at) and all(text.count(o) == 1 for o in OBS)
    assert all(text.count(reply.split("</think>")[0].split("<think>")[1]) == 1 for reply in REPLIES)
    assert text.endswith(prefix)


def test_an_r1_style_generation_prompt_is_read_in_front_of_the_response(with_template):
    """The model continues after "<think>\\n": the parser (and the MI split) see its reasoning."""
    r = ChatRenderer(with_template(R1))
    generated = "Goal is right.</think><answer>Right</answer>"
    assert not parse_response(generated).format_ok
    parsed = parse_response(r.response_prefix + generated)
    assert (parsed.think, parsed.answer) == ("Goal is right.", "Right")


def test_a_template_that_moves_the_system_message_is_refused_with_it_then_handled(with_template):
    tok = with_template(MISTRAL)
    r = ChatRenderer(tok)
    r.system_in_user = False
    # with the system message, the first turn already renders differently once the assistant has
    # answered (the system text sits on the last user message, which is then no longer last)
    with pytest.raises(ChatTemplateError, match="generation prompt is not the text in front of an "
                                                "assistant message"):
        r._verify()


@pytest.mark.parametrize("template, why", [
    (LAST_ONLY, "adding a turn re-renders the earlier ones"),
    (NUMBERED, "the text between turns differs by turn"),
    ("", "no chat_template"),
])
def test_templates_that_cannot_be_rendered_turn_by_turn_are_refused(with_template, template, why):
    with pytest.raises(ChatTemplateError, match=why) as e:
        ChatRenderer(with_template(template))
    if template:  # both placements of the instructions were tried, and each says why not
        assert "with a system role:" in str(e.value) and "without a system role:" in str(e.value)

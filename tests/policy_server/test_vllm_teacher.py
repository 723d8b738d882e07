"""vLLM as the distillation teacher: its `prompt_logprobs` read as `tether train --algorithm opd` reads
them, against the learner's own scoring of the same tokens."""

from __future__ import annotations

import asyncio

from tests.trainer.test_teacher_client import transition
from tether.learner import PolicyTrainer, TrainConfig
from tether.policy_server.vllm import VLLMPolicyServer
from tether.trainer.distill import Teacher, check_teacher, score_transitions


def test_vllm_teaches_the_raw_logprobs_of_the_students_tokens(vllm_server: VLLMPolicyServer) -> None:
    from transformers import AutoTokenizer

    learner = PolicyTrainer(TrainConfig(model="smollm2-135m"))
    tokenizer = AutoTokenizer.from_pretrained(learner.model_path)
    # The base model by name: other tests of the session may have loaded adapters since.
    teacher = Teacher(url=vllm_server.replicas[0].base_url, model=vllm_server.base_model)
    check_teacher(teacher, tokenizer)  # vLLM decodes the student's ids to the same tokens

    prompt = tokenizer.encode("Question: what is 12 + 7?\nAnswer:")
    response = tokenizer.encode(" 12 + 7 = 19, so the answer is 19.", add_special_tokens=False)
    (scores,) = asyncio.run(score_transitions(teacher, [transition(prompt, response)]))
    (own,) = learner.logprobs([transition(prompt, response)])
    gaps = [abs(a - b) for a, b in zip(scores, own, strict=True)]
    assert len(scores) == len(response)
    assert max(gaps) < 0.05 and sum(gaps) / len(gaps) < 0.01, gaps

"""The example's reward: 1.0 when the response's first number is the answer, plus two
logged extras. Called by yatt as score(prompt, response, **row): `row` holds the dataset's
other columns (here `answer` and `topic`)."""
import re


def score(prompt, response, answer, topic="", **row):
    m = re.search(r"-?\d+", response)
    correct = 1.0 if m is not None and m.group(0) == str(answer).strip() else 0.0
    return {"score": correct, "has_number": float(m is not None),
            "words": float(len(response.split()))}

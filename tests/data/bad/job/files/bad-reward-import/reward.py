def score(prompt, response
    return 1.0

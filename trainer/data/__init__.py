"""What a run learns and is judged on: the tasks, the math evaluation sets and evaluation."""

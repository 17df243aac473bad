"""Plain PyTorch reference of ``nested_regions`` (float64 on the CPU), for argus_program.json.

``expected(out, xs, n, iters, rounds)`` takes the launch arguments as the runner passes them and
returns ``{argument index: expected tensor}``. Every step multiplies by 0.5 or 0.75, so float32
rounding in the kernel's fmaf chain stays far inside the program's 1e-4 relative tolerance, and
the values stay near 2-6, away from zero where a relative check would be meaningless.
"""


def mix(acc, x, rounds):
    for _ in range(rounds):
        acc = acc * 0.75 + x
    return acc


def expected(out, xs, n, iters, rounds):
    x = xs.double().clone()
    x[n:] = 0.0
    for _ in range(rounds):
        x = x * 0.5 + 0.25
    acc = mix(x.new_zeros(x.shape), x, rounds)
    for it in range(iters):
        acc = mix(acc, x + it, rounds)
        for _ in range(rounds):
            acc = acc * 0.5 + 1.0
    return {0: acc.float()}

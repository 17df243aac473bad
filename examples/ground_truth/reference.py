"""Plain PyTorch reference of the ground-truth kernel (float64 on the CPU).

``expected(xs, ys, out, trips_a, trips_b, trips_inner, trips_helper)`` takes the launch arguments
(CPU tensors and ints, as the runner passes them) and returns ``{argument index: expected tensor}``.
The GPU computes the same fmaf chain in float32; |y| < 1 keeps the chain contracting, so float32
rounding stays far inside the 1e-4 relative tolerance the program description sets.
"""


def expected(xs, ys, out, trips_a, trips_b, trips_inner, trips_helper):
    x = xs.double()
    y = ys.double()
    for c, trips in ((0.5, trips_a), (0.25, 3 * trips_helper), (0.75, trips_b), (0.125, trips_inner),
                     (0.25, trips_helper)):
        for _ in range(trips):
            x = x * y + c
    return {2: x.float()}

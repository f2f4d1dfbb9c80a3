"""Keep Triton 3.6's interpreter (TRITON_INTERPRET=1) working with NumPy >= 2.4.

The interpreter holds scalars as 1-element arrays and turns a loop bound into a Python int with
int(array); NumPy 2.4 made int() of a non-0-d array a TypeError, so every `range(...)` with a run-time
bound fails. This re-patches the interpreter's `tensor.__index__` to go through `.item()`, which
works on every NumPy. Applied only when the interpreter runs our kernels, and only once.
"""
_applied = False


def apply():
    global _applied
    if _applied:
        return
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor

    def patch_tensor_with_item_index(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    interpreter._patch_lang_tensor = patch_tensor_with_item_index
    _applied = True

"""A safe arithmetic evaluator: numbers, + - * / // % **, unary signs and parentheses; nothing else.

The expression is parsed with `ast` and walked node by node, so names, calls, attributes and every other
construct are rejected before anything runs. Powers are bounded so no expression can eat the machine.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 100
MAX_RESULT_DIGITS = 100  # results beyond 10**100 are refused
Number = int | float

BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    """An expression the calculator refuses or cannot evaluate; the message is meant for the model."""


def _check_power(base: Number, exponent: Number) -> None:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {exponent} is too large (at most {MAX_EXPONENT})")
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) > MAX_RESULT_DIGITS:
        raise CalculatorError("the result is too large")


def _check_size(value: Number) -> Number:
    if isinstance(value, complex):
        raise CalculatorError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    if abs(value) >= 10**MAX_RESULT_DIGITS:
        raise CalculatorError("the result is too large")
    return value


def _value(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check_size(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            return _check_size(BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("the result is too large") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return UNARY[type(node.op)](_value(node.operand))
    raise CalculatorError(f"unsupported syntax: {type(node).__name__}; use numbers, + - * / // % ** and ( )")


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression; raises CalculatorError for anything else."""
    text = expression.strip().replace(",", "")  # 1,200 means twelve hundred here, never a tuple
    if not text:
        raise CalculatorError("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculatorError(f"cannot parse {expression!r} as arithmetic") from None
    return _value(tree.body)


def format_number(value: Number) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as '(16 - 3 - 4) * 2' or '80000 * 1.5'.

    Supports numbers, + - * / // % ** and parentheses. Returns the result, or an error message.
    """
    try:
        return format_number(evaluate(expression))
    except CalculatorError as exc:
        return f"error: {exc}"

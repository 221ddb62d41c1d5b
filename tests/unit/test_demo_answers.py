from app.demo.answers import GENERIC_PROBLEM, MAX_RAW, found, problem
from app.demo.conversation import Result


def result(content: str) -> Result:
    return Result(name="get_order", args={}, content=content)


def test_problem_hides_errors_about_the_call_itself() -> None:
    assert problem(result("Error: invalid arguments for get_order: order_id: Field required")) == (
        GENERIC_PROBLEM
    )
    assert problem(result("Error: there is no tool named 'x'.")) == GENERIC_PROBLEM


def test_problem_keeps_the_first_sentence_of_a_business_error() -> None:
    assert problem(result("Error: order 42 was not found. Check the number.")) == (
        "order 42 was not found."
    )
    assert len(problem(result("Error: " + "x" * 1000))) <= MAX_RAW


def test_raw_tool_text_is_cut_to_one_short_sentence() -> None:
    text = found(result("First part. " + "secret " * 100), "en")
    assert "First part." in text and "secret" not in text
    long = found(result("y" * 1000), "en")
    assert "y" * MAX_RAW not in long and "y" * (MAX_RAW - 1) in long

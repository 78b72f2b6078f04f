"""Source strings with protected spans of every kind (and one without), shared by the span tests: the pure
functions (test_spans.py) and the served models (test_protected_spans.py, test_protected_spans_marian.py)."""

SOURCES = [
    "You have 3 new messages.",
    "<b>Warning:</b> the file %(name)s could not be read from http://example.com/poster.jpg",
    "from {old} to {new}",
    "<strong>%(quota)s</strong>",
    "%s and %s. Total size: %s",
    "Invoice {full_invoice_no} was sent to billing@example.org",
    '<p>Click <a href="https://x.org">here</a> to continue &amp; save.</p>',
    "You have {count, plural, one {# file} other {# files}} in ${folder}",
    "Unbalanced <b>bold text and </i> stray close",
    "{{ user }} logged in at %H:%M",
    "%s",
    "%s: %d (%%)",
    "<br/>",
    "Save &amp; Close",
    "Expected text or optional element <%s>, found <%s> instead",
    "Save changes",  # no span: the output gets none either
]

"""What the tests share: fixtures' helpers, real servers, fuzz corpora."""

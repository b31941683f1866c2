// tests/host/main.cpp — doctest's main for the host test suite (build/tests/host_tests).
// The cases live in the test_*.cpp files beside it, one file per common/ module.
// Run: make test-host   (or: DATA_DIR=../shared/data build/tests/host_tests)
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

// The carrier of the test programs' precompiled header (CMakeLists.txt): a test with no case.

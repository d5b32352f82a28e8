package files

// benchChildEnv marks a bench child process (bench_test.go).
const benchChildEnv = "MESHTRAY_FILES_BENCH_CHILD"

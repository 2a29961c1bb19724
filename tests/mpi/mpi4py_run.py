"""Run mpi4py's own test suite (test/runtests.py of its sdist) with a few tests left out.

    mpirun ... -n 2 python3 tests/mpi/mpi4py_run.py --testdir mpi4py-X.Y.Z/test [runtests options]

runtests.py can only leave out whole modules (`-e PATTERN` on the file name); this wrapper
loads the suite the way runtests.py does, drops the test ids matched by EXCLUDE below (each
with its reason), and runs the rest with
  - one line of progress per test module on rank 0 (tests run, failures, errors, skips, time),
  - a per-test watchdog: a test that runs longer than --per-test-timeout seconds dumps every
    thread's Python traceback and exits the process with status 3 (mpirun then ends the job),
    so a hang names its test instead of waiting for the outer timeout,
  - one line per rank at the end, for tests/mpi/run.sh to parse:
      MPI4PY-SUMMARY rank=R run=N passed=P failures=F errors=E skipped=S xfail=X excluded=K
Exit status 0 when every test that ran passed (skips are mpi4py's own decisions: features the
MPI library reports as missing).
"""

import faulthandler
import os
import re
import sys
import time
import unittest

# Test ids (module.Class.method) left out, and why, per MPI library ("Open MPI", "MPICH", or
# None for both; matched against MPI.Get_library_version()). Only what cannot work on this
# stack, never to hide a failure of the provider: every entry names the reason it cannot pass
# over ni with that library (Open MPI 4.1.4: pml cm + mtl ofi; MPICH 5.0.2: ch4:ofi).
SSEND_MRECV = "Open MPI 4.1.4 mtl ofi: an Ssend received by Mprobe/Mrecv is never acknowledged"

SSEND_MRECV_RC = SSEND_MRECV + " (comm.recv with Mprobe: mpi4py.rc.recv_mprobe on)"

OMPI, MPICH = "Open MPI", "MPICH"

EXCLUDE = [
    # Dynamic process management: MPI_Comm_spawn's children are local ranks 0.. of a job of
    # their own, so the provider attaches them to ni0.sock.., which the parents hold (one
    # process per NI): observed, `ni: fi_domain: the NI at .../ni0.sock is busy: another
    # process is attached to it`, the children's MPI_Init fails (PML cm cannot be selected) and
    # the job aborts. (TestSpawnWorld also hung here with Open MPI's default ob1/vader.)
    (None, r"^test_spawn\.", "MPI_Comm_spawn: the children would need NIs of their own (one process per NI)"),
    # Open MPI 4.1.4's mtl ofi never sends the synchronous-send acknowledgement for a message
    # received with MPI_Mrecv, so an MPI_Ssend/MPI_Issend matched by MPI_Mprobe/MPI_Improbe
    # never completes (fixed upstream by open-mpi/ompi#11327 "MTL/OFI: Refactor SSend ACK
    # generation and allow MRecv to process SSend's", 5.0.x backport #11369). mpi4py receives
    # pickled objects (comm.recv, and everything in mpi4py.util.pkl5) with Mprobe + Mrecv, so
    # every test that pairs ssend/issend with an object receive hangs in the send. A C program
    # doing Issend + Mprobe/Mrecv (tests/mpi/repro/ssend_mrecv.c) hangs the same way with
    # libfabric's own tcp and sockets providers: not ni's doing. tests/mpi/p2p.c checks
    # Ssend/Issend with MPI_Recv instead.
    # With MPI4PY_RC_RECV_MPROBE=no (mpi4py.rc.recv_mprobe False) comm.recv uses MPI_Probe +
    # MPI_Recv, and the SSEND_MRECV_RC ones run (tests/mpi/run.sh makes that second pass).
    (OMPI, r"^test_p2p_obj\.TestP2PObj\w+\.(testSSendAndRecv|testISSendAndRecv|testCancel|testProbe"
     r"|testTestSomeSend|testWaitSomeSend)$", SSEND_MRECV_RC),
    (OMPI, r"^test_dynproc\.TestDPM\.testJoin$", SSEND_MRECV_RC),
    (OMPI, r"^test_util_pkl5\.\w+\.(testSSendAndRecv|testISSendAndRecv|testISSendCancel|testSSendAndMProbe"
     r"|testMProbe|testIMProbe|testProbe|testMessageProbeIProbe|testTestAll|testWaitAll)$", SSEND_MRECV),
    # Open MPI 4.1.4's pml cm does not add the datatype's lower bound to the buffer of a
    # persistent send (MPI_Send_init/MPI_Start, which coll/basic's MPI_Alltoallw uses): with
    # MPI_BOTTOM and struct types of absolute addresses it hands fi_tsend a NULL buffer
    # (provider warning `ni: fi_tsend: a null buffer of 4 bytes`), MPI_Start drops the error
    # and the request never completes: the test hangs. Blocking and nonblocking sends from
    # MPI_BOTTOM work (tests/mpi/p2p.c checks them; pml ob1 passes this test). Open MPI bug:
    # tests/mpi/repro/persistent_bottom.c (libfabric's tcp and sockets providers segfault).
    (OMPI, r"\.testAlltoallwBottom$", "Open MPI 4.1.4 pml cm: persistent send from MPI_BOTTOM loses the datatype lb"),
    # The test assumes that if MPI_Testall finds six standard-mode sends to oneself not all
    # complete, MPI_Testsome right after finds none complete. MPI promises nothing about when
    # a standard send completes; with pml cm + mtl ofi and a manual-progress provider, eager
    # sends complete during the progress Testall makes, so Testsome then reports them
    # ("False is not true" at test_p2p_obj.py:276). Fails the same way with libfabric's tcp
    # provider; passes with ob1's self BTL, which completes them inside Isend.
    (OMPI, r"^test_p2p_obj\.TestP2PObj\w+\.testManyISendAndRecv$",
     "assumes send-completion timing of ob1's self BTL (MPI leaves it open)"),
    # MPICH 5 delivers a rank's messages to itself through its shared-memory module even with
    # MPIR_CVAR_NOLOCAL=1 (a rank is always local to itself), others through the netmod. Its
    # MPI_Probe(MPI_ANY_SOURCE) looks at shared memory, then at the netmod; MPI_Recv(ANY_SOURCE)
    # matches shared memory's message first. MPI_Dist_graph_create probes ANY_SOURCE, sizes a
    # buffer from the probed count and receives ANY_SOURCE (src/mpi/topo/dist_graph_create.c):
    # when the peer's message (netmod) is there before the self message reaches shared
    # memory, the probe sees the peer's and the receive takes the self message: one edge too
    # many ("(4, 3, False) != (3, 3, False)"). ni delivers fast enough to hit it every time;
    # libfabric's tcp provider is slow enough to hide it. tests/mpi/repro/probe_any_self.c
    # shows it without mpi4py (MISMATCH lines); Open MPI has one queue and never does it.
    (MPICH, r"^test_comm_topo\.TestTopoWorld\w*\.testDistgraphcomm$",
     "MPICH 5: Probe(ANY_SOURCE) and Recv(ANY_SOURCE) disagree between shm (self) and netmod"),
    # mpi4py 3.1.4 predates MPI 4's MPI_ERR_ERRHANDLER: it expects MPI_ERR_ARG for a null
    # errhandler; MPICH 5 returns class 80 ("generated error class is '<unknown>' (80), but
    # expected 'ERR_ARG' (12)"). Fails the same with libfabric's tcp provider.
    (MPICH, r"^test_exceptions\.TestExcErrhandlerNull\.(testCommSelfSetErrhandler"
     r"|testCommWorldSetErrhandler|testFree)$",
     "mpi4py 3.1.4 expects MPI_ERR_ARG where MPI 4 (MPICH 5) says MPI_ERR_ERRHANDLER"),
    # MPI_Win_allocate_shared needs the ranks in one shared-memory domain; with
    # MPIR_CVAR_NOLOCAL=1 (so that ranks talk over ni) every rank is a node of its own:
    # "processes are not in the same shared memory domain". Same with libfabric's tcp.
    (MPICH, r"^test_win\.TestWinAllocateSharedWorld\.",
     "MPI_Win_allocate_shared on WORLD: MPIR_CVAR_NOLOCAL=1 puts every rank on a node of its own"),
]


def main():
    argv = sys.argv[1:]
    testdir = None
    per_test = 120.0
    rest = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--testdir":
            testdir = argv[i + 1]
            i += 2
        elif a == "--per-test-timeout":
            per_test = float(argv[i + 1])
            i += 2
        else:
            rest.append(a)
            i += 1
    if not testdir or not os.path.isfile(os.path.join(testdir, "runtests.py")):
        sys.stderr.write("mpi4py_run.py: --testdir must name mpi4py's test/ directory\n")
        return 2
    testdir = os.path.abspath(testdir)
    sys.path.insert(0, testdir)
    os.chdir(os.path.dirname(testdir))
    import runtests  # mpi4py's own runner (its option parser, loader, setup)

    parser = runtests.getoptionparser()
    options, args = parser.parse_args(["--no-builddir"] + rest)
    runtests.setup_python(options)
    runtests.setup_unittest(options)
    package = runtests.import_package(options, "mpi4py")
    runtests.print_banner(options, package)
    import mpi4py
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    suite = runtests.load_tests(options, args)

    kept, excluded = unittest.TestSuite(), {}

    def flatten(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                yield from flatten(t)
            else:
                yield t

    # this library's exclusions; comm.recv without matched probes: the exclusions that only
    # concern it do not apply
    lib = MPI.Get_library_version()
    lib = MPICH if lib.startswith("MPICH") else OMPI if lib.startswith("Open MPI") else None
    exclude = [(p, w) for who, p, w in EXCLUDE
               if who in (None, lib) and (mpi4py.rc.recv_mprobe or w != SSEND_MRECV_RC)]
    for t in flatten(suite):
        for pat, why in exclude:
            if re.search(pat, t.id()):
                excluded.setdefault((pat, why), []).append(t.id())
                break
        else:
            kept.addTest(t)
    nexcl = sum(len(v) for v in excluded.values())
    if rank == 0:
        for (pat, why), ids in excluded.items():
            print(f"==> mpi4py: excluded {len(ids)} test(s) matching {pat!r}: {why}", flush=True)
        print(f"==> mpi4py: mpi4py.rc.recv_mprobe = {mpi4py.rc.recv_mprobe}", flush=True)
        print(f"==> mpi4py: running {kept.countTestCases()} tests on {MPI.COMM_WORLD.Get_size()} ranks "
              f"({MPI.Get_library_version().splitlines()[0].strip()})", flush=True)

    class Result(unittest.TextTestResult):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.passed = 0
            self.mod = None
            self.mod_t0 = time.time()
            self.mod_counts = [0, 0, 0, 0]  # run, failures+errors, skipped, passed

        def _flush_module(self):
            if self.mod is not None and rank == 0:
                run, bad, skipped, _ = self.mod_counts
                print(f"==> mpi4py [rank 0] {self.mod}: {run} run, {bad} failed/errored, "
                      f"{skipped} skipped ({time.time() - self.mod_t0:.1f} s)", flush=True)

        def startTest(self, test):
            mod = test.id().split(".")[0]
            if mod != self.mod:
                self._flush_module()
                self.mod, self.mod_t0, self.mod_counts = mod, time.time(), [0, 0, 0, 0]
            self.mod_counts[0] += 1
            faulthandler.dump_traceback_later(per_test, exit=True)
            super().startTest(test)

        def stopTest(self, test):
            faulthandler.cancel_dump_traceback_later()
            super().stopTest(test)

        def addSuccess(self, test):
            self.passed += 1
            super().addSuccess(test)

        def addFailure(self, test, err):
            self.mod_counts[1] += 1
            print(f"FAIL mpi4py [rank {rank}] {test.id()}\n{self._exc_info_to_string(err, test)}", flush=True)
            super().addFailure(test, err)

        def addError(self, test, err):
            self.mod_counts[1] += 1
            print(f"FAIL mpi4py [rank {rank}] {test.id()} (error)\n{self._exc_info_to_string(err, test)}",
                  flush=True)
            super().addError(test, err)

        def addSkip(self, test, reason):
            self.mod_counts[2] += 1
            super().addSkip(test, reason)

    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=0, resultclass=Result)
    t0 = time.time()
    result = runner.run(kept)
    result._flush_module()
    # unittest counts a subTest failure per subtest; `passed` counts whole tests.
    print(f"\nMPI4PY-SUMMARY rank={rank} run={result.testsRun} passed={result.passed} "
          f"failures={len(result.failures)} errors={len(result.errors)} skipped={len(result.skipped)} "
          f"xfail={len(result.expectedFailures)} excluded={nexcl} seconds={time.time() - t0:.1f}",
          flush=True)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    sys.exit(main())

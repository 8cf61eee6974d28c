/* Open MPI peer for benchmarks/peerbench: MPI_Allreduce of float32 (sum)
 * timed like commbench (3 untimed iterations, then about 64 MiB of
 * traffic: 3..2000 iterations, between barriers; rank 0 reports) and
 * checked once per size. One JSON object per size on stdout, in
 * commbench's -json schema.
 *
 *   mpicc -O2 -o /tmp/mpi_allreduce benchmarks/peers/mpi_allreduce.c
 *   mpirun --allow-run-as-root --oversubscribe -np 2 /tmp/mpi_allreduce 4096 1048576
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int iterations(long bytes) {
	long it = (64L << 20) / bytes;
	if (it < 3) it = 3;
	if (it > 2000) it = 2000;
	return (int)it;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, world;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	for (int a = 1; a < argc; a++) {
		long bytes = atol(argv[a]);
		long count = bytes / 4;
		if (count < 1) {
			if (rank == 0) fprintf(stderr, "mpi_allreduce: bad size %s\n", argv[a]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
		for (long i = 0; i < count; i++) in[i] = (float)((rank + i) % 5);
		/* Check: the sum over ranks of (r + i) % 5. */
		MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		int ok = 1;
		for (long i = 0; i < count && ok; i++) {
			float want = 0;
			for (int r = 0; r < world; r++) want += (float)((r + i) % 5);
			ok = out[i] == want;
		}
		int iters = iterations(bytes);
		for (int i = 0; i < 3; i++) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (int i = 0; i < iters; i++) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		MPI_Barrier(MPI_COMM_WORLD);
		double dt = (MPI_Wtime() - t0) / iters;
		if (rank == 0) {
			double alg = bytes / dt / 1e9;
			printf("{\"op\":\"all_reduce\",\"backend\":\"openmpi\",\"world\":%d,\"bytes\":%ld,\"count\":%ld,"
			       "\"dtype\":\"float32\",\"iters\":%d,\"time_us\":%.3f,\"algbw_gbs\":%.6f,\"busbw_gbs\":%.6f,\"correct\":%s}\n",
			       world, bytes, count, iters, dt * 1e6, alg, alg * 2.0 * (world - 1) / world, ok ? "true" : "false");
			fflush(stdout);
		}
		free(in);
		free(out);
	}
	MPI_Finalize();
	return 0;
}

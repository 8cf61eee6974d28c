package rendezvous

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gdist/gdist/comm"
)

func lookupMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestFromLookupLaunchers(t *testing.T) {
	cases := []struct {
		name string
		vars map[string]string
		want Env // Token not compared here
	}{
		{"nothing", map[string]string{},
			Env{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, MasterAddr: "127.0.0.1", MasterPort: 29500, StorePort: 29500, TokenDerived: true, Launcher: "manual"}},
		{"gdist", map[string]string{"GDIST_LAUNCHED": "1", "RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4",
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "40001", "GDIST_STORE_ADDR": "127.0.0.1:40001", "GDIST_TOKEN": "00ff"},
			Env{Rank: 2, Size: 4, LocalRank: 2, LocalSize: 4, MasterAddr: "127.0.0.1", MasterPort: 40001, StorePort: 40001, StoreAddr: "127.0.0.1:40001", Launcher: "gdist"}},
		{"torchrun", map[string]string{"TORCHELASTIC_RUN_ID": "abc", "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
			"MASTER_ADDR": "node0", "MASTER_PORT": "29400"},
			Env{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4, MasterAddr: "node0", MasterPort: 29400, StorePort: 29401, TokenDerived: true, Launcher: "torchrun", JobID: "TORCHELASTIC_RUN_ID=abc"}},
		{"torchrun store port", map[string]string{"TORCHELASTIC_RUN_ID": "abc", "RANK": "0", "WORLD_SIZE": "2", "GDIST_STORE_PORT": "31000"},
			Env{Rank: 0, Size: 2, LocalRank: 0, LocalSize: 2, MasterAddr: "127.0.0.1", MasterPort: 29500, StorePort: 31000, TokenDerived: true, Launcher: "torchrun", JobID: "TORCHELASTIC_RUN_ID=abc"}},
		{"manual", map[string]string{"RANK": "1", "WORLD_SIZE": "3"},
			Env{Rank: 1, Size: 3, LocalRank: 1, LocalSize: 3, MasterAddr: "127.0.0.1", MasterPort: 29500, StorePort: 29500, TokenDerived: true, Launcher: "manual"}},
		{"mpirun", map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
			"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_PORT": "23456", "GDIST_TOKEN": "raw secret"},
			Env{Rank: 3, Size: 4, LocalRank: 1, LocalSize: 2, MasterAddr: "127.0.0.1", MasterPort: 23456, StorePort: 23456, Launcher: "mpirun"}},
		{"srun", map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
			"SLURM_TASKS_PER_NODE": "2(x2),3", "SLURM_NNODES": "3", "SLURM_NODELIST": "gpu[07-09]", "MASTER_PORT": "25000"},
			Env{Rank: 5, Size: 6, LocalRank: 1, LocalSize: 3, MasterAddr: "gpu07", MasterPort: 25000, StorePort: 25000, TokenDerived: true, Launcher: "srun"}},
		{"srun one node", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "2",
			"SLURM_NODELIST": "n1", "MASTER_PORT": "25000"},
			Env{Rank: 0, Size: 2, LocalRank: 0, LocalSize: 2, MasterAddr: "127.0.0.1", MasterPort: 25000, StorePort: 25000, TokenDerived: true, Launcher: "srun"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := FromLookup(lookupMap(c.vars))
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Token) == 0 {
				t.Fatal("empty token")
			}
			got.Token = nil
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestFromLookupToken(t *testing.T) {
	e, _ := FromLookup(lookupMap(map[string]string{"GDIST_TOKEN": "00ff10"}))
	if !bytes.Equal(e.Token, []byte{0, 0xff, 0x10}) || e.TokenDerived {
		t.Errorf("hex token: %x %v", e.Token, e.TokenDerived)
	}
	e, _ = FromLookup(lookupMap(map[string]string{"GDIST_TOKEN": "not hex!"}))
	if string(e.Token) != "not hex!" || e.TokenDerived {
		t.Errorf("raw token: %q %v", e.Token, e.TokenDerived)
	}
	// Derived tokens: equal for one job, different across jobs, not the dev token.
	job := func(id string) []byte {
		e, err := FromLookup(lookupMap(map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": id}))
		if err != nil || !e.TokenDerived {
			t.Fatalf("%v %v", err, e.TokenDerived)
		}
		return e.Token
	}
	dev, _ := FromLookup(lookupMap(nil))
	if !bytes.Equal(job("17"), job("17")) || bytes.Equal(job("17"), job("18")) || bytes.Equal(job("17"), dev.Token) {
		t.Error("derived tokens do not depend on the job id alone")
	}
}

func TestFromLookupDerivedPort(t *testing.T) {
	port := func(vars map[string]string) int {
		e, err := FromLookup(lookupMap(vars))
		if err != nil {
			t.Fatal(err)
		}
		if e.MasterPort < 20000 || e.MasterPort >= 30000 || e.StorePort != e.MasterPort {
			t.Fatalf("port %d / %d", e.MasterPort, e.StorePort)
		}
		return e.MasterPort
	}
	mpi := map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_MCA_ess_base_jobid": "1234567"}
	p1 := port(mpi)
	mpi["OMPI_MCA_ess_base_jobid"] = "7654321"
	if p1 == port(mpi) {
		t.Errorf("two Open MPI jobs got the same port %d", p1)
	}
	slurm := map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "99"}
	if p := port(slurm); p == DefaultMasterPort {
		t.Errorf("slurm port %d", p)
	}
}

func TestFromLookupErrors(t *testing.T) {
	cases := []struct {
		vars    map[string]string
		mention string
	}{
		{map[string]string{"RANK": "x", "WORLD_SIZE": "2"}, "RANK"},
		{map[string]string{"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2"},
		{map[string]string{"RANK": "-1", "WORLD_SIZE": "2"}, "RANK"},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE"},
		{map[string]string{"RANK": "0"}, "WORLD_SIZE is not set"},
		{map[string]string{"WORLD_SIZE": "2"}, "RANK is not set"},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK"},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "70000"}, "MASTER_PORT"},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"}, "OMPI_COMM_WORLD_RANK"},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE"},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "two"}, "SLURM_NTASKS"},
		{map[string]string{"SLURM_PROCID": "0"}, "SLURM_NTASKS"},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2(x"}, "SLURM_TASKS_PER_NODE"},
	}
	for _, c := range cases {
		_, err := FromLookup(lookupMap(c.vars))
		if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%v: got %v, want an invalid-argument error naming %s", c.vars, err, c.mention)
		}
	}
}

func TestSlurmHelpers(t *testing.T) {
	hosts := map[string]string{
		"n1":                 "n1",
		"n1,n2":              "n1",
		"gpu[03-05,9],cpu1":  "gpu03",
		"gpu[9]":             "gpu9",
		"rack1-[2,4]-x,rack": "rack1-2-x",
		"bad[":               "",
	}
	for in, want := range hosts {
		if got := firstSlurmHost(in); got != want {
			t.Errorf("firstSlurmHost(%q) = %q, want %q", in, got, want)
		}
	}
	tasks := []struct {
		list string
		node int
		want int
		ok   bool
	}{
		{"4", 0, 4, true}, {"4(x3)", 2, 4, true}, {"4(x3)", 3, 0, false},
		{"2(x2),1", 2, 1, true}, {"x", 0, 0, false}, {"2(y2)", 0, 0, false},
	}
	for _, c := range tasks {
		got, ok := slurmTasksOnNode(c.list, c.node)
		if got != c.want || ok != c.ok {
			t.Errorf("slurmTasksOnNode(%q, %d) = %d, %v", c.list, c.node, got, ok)
		}
	}
}

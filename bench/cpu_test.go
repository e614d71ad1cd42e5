package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// A cpuMeter reads the CPU time a server has used so far, by the server's
// (or the kernel's) own accounting. Its deltas over a round, divided by the
// requests the round made, are the tables' "CPU per request".
type cpuMeter func(ctx context.Context) (time.Duration, error)

// redisCPU reads Redis's own account of its main thread's CPU (INFO cpu:
// used_cpu_sys_main_thread + used_cpu_user_main_thread). The main thread
// runs every command and script and does the connections' reads and writes;
// the AOF's fsync, which with appendfsync everysec runs in a background
// thread once a second, is left out.
func redisCPU(c *redis.Client) cpuMeter {
	return func(ctx context.Context) (time.Duration, error) {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return 0, err
		}
		var total float64
		found := 0
		for line := range strings.SplitSeq(info, "\n") {
			name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || (name != "used_cpu_sys_main_thread" && name != "used_cpu_user_main_thread") {
				continue
			}
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu: %s: %w", name, err)
			}
			total += f
			found++
		}
		if found != 2 {
			return 0, fmt.Errorf("INFO cpu has no used_cpu_*_main_thread (Redis 6.2 or later has them):\n%s", info)
		}
		return time.Duration(total * float64(time.Second)), nil
	}
}

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux this runs on).
const clockTick = 10 * time.Millisecond

// postgresCPU reads the CPU time of a PostgreSQL server from the kernel's
// accounting in /proc: utime + stime of the postmaster and of each of its
// children (the connections' backends, the WAL writer, the checkpointer and
// the other background processes), plus the postmaster's cutime + cstime,
// which hold the time of the children that ended. The postmaster is found
// as the parent of one of pool's backends; the server must run on this
// machine.
func postgresCPU(ctx context.Context, pool *pgxpool.Pool) (cpuMeter, error) {
	var backend int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return nil, err
	}
	st, err := procStat(backend)
	if err != nil {
		return nil, fmt.Errorf("the server's CPU is read from /proc, so it must run on this machine: %w", err)
	}
	postmaster := int(st.ppid)
	return func(context.Context) (time.Duration, error) {
		pm, err := procStat(postmaster)
		if err != nil {
			return 0, err
		}
		ticks := pm.utime + pm.stime + pm.cutime + pm.cstime
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return 0, err
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			st, err := procStat(pid)
			if err != nil || st.ppid != int64(postmaster) {
				continue // not a child, or it ended since the listing
			}
			ticks += st.utime + st.stime
		}
		return time.Duration(ticks) * clockTick, nil
	}, nil
}

type stat struct{ ppid, utime, stime, cutime, cstime int64 }

// procStat reads the fields of /proc/<pid>/stat it needs: ppid (4),
// utime (14), stime (15), cutime (16) and cstime (17). The command name
// (2) is in parentheses and may hold spaces, so the fields are counted
// from after its closing one.
func procStat(pid int) (stat, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return stat{}, err
	}
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return stat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(line[i+1:]) // fields[0] is field 3, the state
	if len(fields) < 15 {
		return stat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	var n [5]int64
	for k, field := range []int{4, 14, 15, 16, 17} {
		if n[k], err = strconv.ParseInt(fields[field-3], 10, 64); err != nil {
			return stat{}, fmt.Errorf("/proc/%d/stat field %d: %w", pid, field, err)
		}
	}
	return stat{ppid: n[0], utime: n[1], stime: n[2], cutime: n[3], cstime: n[4]}, nil
}

// measured runs f and returns its result with the CPU meter used in the
// meantime (0 when meter is nil).
func measured(ctx context.Context, meter cpuMeter, f func() Result) (Result, time.Duration, error) {
	if meter == nil {
		return f(), 0, nil
	}
	before, err := meter(ctx)
	if err != nil {
		return Result{}, 0, err
	}
	r := f()
	after, err := meter(ctx)
	if err != nil {
		return Result{}, 0, err
	}
	return r, after - before, nil
}

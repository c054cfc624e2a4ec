//go:build linux

package pacing

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CgroupV2Mount returns where the cgroup-v2 hierarchy is mounted (on a
// hybrid host it is not /sys/fs/cgroup itself but e.g.
// /sys/fs/cgroup/unified), from /proc/self/mountinfo.
func CgroupV2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("pacing: cgroup2 mount: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "id parent major:minor root mountpoint options ... - fstype source superopts"
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("pacing: cgroup2 mount: %w", err)
	}
	return "", errors.New("pacing: no cgroup2 hierarchy mounted")
}

// currentCgroup returns this process's cgroup-v2 directory under mount.
func currentCgroup(mount string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mount, rel), nil
		}
	}
	return "", errors.New("no cgroup-v2 line in /proc/self/cgroup")
}

// WithProcessIn runs fn with the whole process moved into the cgroup-v2
// directory cgroupPath, and moves it back to where it was. A socket
// belongs to the cgroup its creator was in when it was made, and an MPTCP
// subflow to its connection's, so the sockets fn opens stay paced after
// the process leaves. Other goroutines' sockets made meanwhile join the
// cgroup too.
func WithProcessIn(cgroupPath string, fn func() error) error {
	mount, err := CgroupV2Mount()
	if err != nil {
		return err
	}
	home, err := currentCgroup(mount)
	if err != nil {
		return fmt.Errorf("pacing: %w", err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(filepath.Join(cgroupPath, "cgroup.procs"), pid, 0); err != nil {
		return fmt.Errorf("pacing: join cgroup %s: %w", cgroupPath, err)
	}
	ferr := fn()
	if err := os.WriteFile(filepath.Join(home, "cgroup.procs"), pid, 0); err != nil {
		return errors.Join(ferr, fmt.Errorf("pacing: back to cgroup %s: %w", home, err))
	}
	return ferr
}

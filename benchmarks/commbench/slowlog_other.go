//go:build !linux

package main

import "time"

type slowLog struct{}

func startSlowLog(dir string, rank int) *slowLog { return nil }

func (s *slowLog) write(start time.Time, starts, per []time.Duration) error { return nil }

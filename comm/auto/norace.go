//go:build !race

package auto

func raceReleaseIO() {}

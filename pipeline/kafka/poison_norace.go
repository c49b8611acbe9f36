//go:build !race

package kafka

// poisonReleased: see poison_race.go.
const poisonReleased = false

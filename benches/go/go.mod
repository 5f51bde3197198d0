module gomutex/benches/go

go 1.19

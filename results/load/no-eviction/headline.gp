set terminal pngcairo size 1200,480 font 'sans,10'
set output 'results/load/no-eviction/headline.png'
set multiplot layout 1,2 title 'leapcache-load: same workload, same 6144 MiB state budget'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set key top left
set yrange [0:100]
set ylabel 'hit rate (%)'
set title 'request and token hit rate'
plot 'results/load/no-eviction/headline.dat' using 2:xtic(1) title 'requests', '' using 3 title 'tokens'
set yrange [0:*]
set ylabel 'checkpoints'
set title 'resident checkpoints at the end'
plot 'results/load/no-eviction/headline.dat' using 4:xtic(1) title 'resident' lc rgb '#4477aa'
unset multiplot
